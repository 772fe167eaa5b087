#include "lib/fp8/layers/fp8_activation.h"

#include <torch/torch.h>  // torch::autograd::Function

#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::to_ivalue, from_ivalue

namespace fp8t {
namespace fp8 {

namespace {

using Kind = model::Activation::Kind;

// What the recipe casts for an activation of `kind`: its value at h, and its gradient for dy.
CastSource value_of(Kind kind, const at::Tensor& h) {
  return kind == Kind::kSwiGLU ? CastSource::swiglu(h) : CastSource::gelu(h);
}

CastSource gradient_of(Kind kind, const at::Tensor& dy, const at::Tensor& h) {
  return kind == Kind::kSwiGLU ? CastSource::dswiglu(dy, h) : CastSource::dgelu(dy, h);
}

// The activation's output shape for input sizes h (SwiGLU halves the last dim).
std::vector<int64_t> output_sizes(Kind kind, at::IntArrayRef h) {
  std::vector<int64_t> sizes = h.vec();
  if (kind == Kind::kSwiGLU) sizes.back() /= 2;
  return sizes;
}

// Autograd node of Fp8Activation. Saves h (what the activation's backward reads), as at::gelu /
// at::silu do, the kind, and a reference to the producer's gradient state (not the layer: the
// backward may outlive it).
class Fp8ActivationFunction : public torch::autograd::Function<Fp8ActivationFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, Fp8Activation* layer) {
    const Kind kind = layer->kind();
    ctx->save_for_backward({h});
    ctx->saved_data["kind"] = static_cast<int64_t>(kind);
    if (layer->producer() != nullptr) {
      ctx->saved_data["producer"] = compat::to_ivalue(layer->producer()->grad_state());
    }
    Fp8Linear* consumer = layer->consumer();
    const bool training = layer->is_training() && h.requires_grad();
    if (consumer == nullptr || !consumer->takes_fp8_input_only(training)) return materialize(value_of(kind, h));

    const at::Tensor h2 = h.reshape({-1, h.size(-1)});
    // Deferred (train.recompute activation): the columnwise copy (c_proj's wgrad operand, as large
    // as the rowwise one) is cast in the backward from h, which this node saves anyway.
    const bool col = consumer->needs_input_columnwise(training);
    Fp8Linear* producer = layer->producer();
    const bool from_gradient = col && kind == Kind::kSwiGLU && layer->value_copy_from_gradient_cast() &&
                               producer != nullptr && producer->takes_fp8_grad_only();
    const bool later = col && (layer->defers_columnwise() || from_gradient);
    CastOptions opt;
    opt.columnwise = col && !later;
    opt.record = training;
    Fp8Tensor y_fp8 = consumer->scaling().quantize(consumer->slot_input(), value_of(kind, h2), opt);
    at::Tensor carrier = nan_carrier(output_sizes(kind, h.sizes()), h.options());
    consumer->set_pending_input(carrier, std::move(y_fp8),
                                later ? std::optional<CastSource>(value_of(kind, h2)) : std::nullopt,
                                from_gradient ? producer->grad_state() : c10::intrusive_ptr<Fp8LinearGradState>());
    return carrier;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor h = ctx->get_saved_variables()[0];
    const Kind kind = static_cast<Kind>(ctx->saved_data["kind"].toInt());
    const auto found = ctx->saved_data.find("producer");
    if (found == ctx->saved_data.end() ||
        !compat::from_ivalue<Fp8LinearGradState>(found->second)->takes_fp8_grad_only()) {
      return {materialize(gradient_of(kind, grads[0], h)), at::Tensor()};
    }
    Fp8LinearGradState& producer = *compat::from_ivalue<Fp8LinearGradState>(found->second);
    at::Tensor carrier = nan_carrier(h.sizes(), h.options());
    // The consumer's backward may have cast this gradient already (value_copy_from_gradient_cast),
    // from the very tensor that arrives here.
    Fp8LinearGradState::PendingGrad cast;
    std::swap(cast, producer.cast_by_consumer);
    if (cast.carrier.defined() && grads[0].defined() && cast.carrier.data_ptr() == grads[0].data_ptr() &&
        cast.carrier.numel() == grads[0].numel()) {
      cast.carrier = carrier;
      producer.pending = std::move(cast);
      return {carrier, at::Tensor()};
    }
    const at::Tensor h2 = h.reshape({-1, h.size(-1)});
    const at::Tensor dy = grads[0].reshape({-1, grads[0].size(-1)});
    at::Tensor dbias;
    CastOptions opt;
    opt.columnwise = true;
    opt.dbias = producer.has_bias ? &dbias : nullptr;
    Fp8Tensor g_fp8 = producer.scaling->quantize(producer.slot_grad, gradient_of(kind, dy, h2), opt);
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

Fp8Activation::Fp8Activation(Kind kind, std::shared_ptr<Fp8Linear> producer, std::shared_ptr<Fp8Linear> consumer)
    : kind_(kind), producer_(std::move(producer)), consumer_(std::move(consumer)) {
  FP8T_CHECK(producer_ || consumer_, "a fused FP8 activation needs an FP8 producer or consumer Linear");
}

at::Tensor Fp8Activation::forward(const at::Tensor& h) { return Fp8ActivationFunction::apply(h, this); }

}  // namespace fp8
}  // namespace fp8t
