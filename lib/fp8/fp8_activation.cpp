#include "lib/fp8/fp8_activation.h"

#include <torch/torch.h>  // torch::autograd::Function

#include <limits>  // std::numeric_limits

#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::to_ivalue, from_ivalue

namespace fp8t {
namespace fp8 {

namespace {

// Autograd node of Fp8Gelu. Saves h (what the GELU backward reads), as at::gelu does, and a
// reference to the producer's gradient state (not the layer: the backward may outlive it).
class Fp8GeluFunction : public torch::autograd::Function<Fp8GeluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, Fp8Gelu* layer) {
    ctx->save_for_backward({h});
    if (layer->producer() != nullptr) {
      ctx->saved_data["producer"] = compat::to_ivalue(layer->producer()->grad_state());
    }
    Fp8Linear* consumer = layer->consumer();
    const bool training = layer->is_training() && h.requires_grad();
    if (consumer == nullptr || !consumer->takes_fp8_input_only(training)) return at::gelu(h, "tanh");

    const at::Tensor h2 = h.reshape({-1, h.size(-1)});
    CastOptions opt;
    opt.columnwise = consumer->needs_input_columnwise(training);
    opt.record = training;
    Fp8Tensor y_fp8 = consumer->scaling().quantize(consumer->slot_input(), CastSource::gelu(h2), opt);
    at::Tensor carrier = nan_carrier(h.sizes(), h.options());
    consumer->set_pending_input(carrier, std::move(y_fp8));
    return carrier;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor h = ctx->get_saved_variables()[0];
    const auto found = ctx->saved_data.find("producer");
    if (found == ctx->saved_data.end() ||
        !compat::from_ivalue<Fp8LinearGradState>(found->second)->takes_fp8_grad_only()) {
      return {at::gelu_backward(grads[0].to(h.scalar_type()), h, "tanh"), at::Tensor()};
    }
    Fp8LinearGradState& producer = *compat::from_ivalue<Fp8LinearGradState>(found->second);
    const int64_t n = h.size(-1);
    const at::Tensor h2 = h.reshape({-1, n});
    const at::Tensor dy = grads[0].reshape({-1, n});
    at::Tensor dbias;
    CastOptions opt;
    opt.columnwise = true;
    opt.dbias = producer.has_bias ? &dbias : nullptr;
    Fp8Tensor g_fp8 = producer.scaling->quantize(producer.slot_grad, CastSource::dgelu(dy, h2), opt);
    at::Tensor carrier = nan_carrier(h.sizes(), h.options());
    producer.pending = {carrier, std::move(g_fp8), std::move(dbias)};
    return {carrier, at::Tensor()};
  }
};

}  // namespace

at::Tensor nan_carrier(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty_strided(sizes, std::vector<int64_t>(sizes.size(), 0), options);
  t.as_strided({1}, {1}).fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

Fp8Gelu::Fp8Gelu(std::shared_ptr<Fp8Linear> producer, std::shared_ptr<Fp8Linear> consumer)
    : producer_(std::move(producer)), consumer_(std::move(consumer)) {
  FP8T_CHECK(producer_ || consumer_, "Fp8Gelu needs an FP8 producer or consumer Linear");
}

at::Tensor Fp8Gelu::forward(const at::Tensor& h) { return Fp8GeluFunction::apply(h, this); }

}  // namespace fp8
}  // namespace fp8t
