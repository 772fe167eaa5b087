#include "lib/fp8/fp8_norm.h"

#include <torch/torch.h>  // torch::autograd::Function

#include "lib/fp8/fp8_activation.h"  // nan_carrier
#include "lib/util/torch_compat.h"   // compat::autocast_dtype_or

namespace fp8t {
namespace fp8 {

namespace {

// How the norm's output reaches the consumer's FP8 input slot: cast in the norm kernel with a
// scale known beforehand (`fused`, delayed scaling), or written in high precision with its amax
// computed in the same kernel and then cast by the recipe (current, block).
struct NormCast {
  Scaling* scaling;
  int slot;
  bool record;
  bool columnwise;                // the consumer's wgrad needs the columnwise copy
  std::optional<SlotRef> fused;   // Scaling::fused_cast_slot
};

// Autograd node of Fp8Norm on 2-D x. The FP8 copy of y is returned through *y_fp8.
class Fp8NormFunction : public torch::autograd::Function<Fp8NormFunction> {
 public:
  // carrier_dtype >= 0: return a carrier of that dtype instead of y (the consumer reads only
  // y_fp8; see fp8_activation.h), and do not write y at all.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gamma,
                            const std::optional<at::Tensor>& beta_opt, double eps, bool rms, const NormCast* cast,
                            Fp8Tensor* y_fp8, int64_t carrier_dtype) {
    // Optional tensors go in as std::optional: LibTorch's custom functions reject undefined inputs.
    const at::Tensor beta = beta_opt.value_or(at::Tensor());
    Backend& backend = backend_for(x.device());
    const bool carrier = carrier_dtype >= 0;
    NormForwardResult r;
    if (cast->fused) {
      r = backend.norm_forward(x, gamma, beta, eps, rms, &*cast->fused, /*write_y=*/!carrier);
      *y_fp8 = std::move(r.y_fp8);
    } else {
      CastOptions opt;
      opt.columnwise = cast->columnwise;
      opt.record = cast->record;
      opt.known_amax = at::zeros({}, x.options().dtype(at::kFloat));
      r = backend.norm_forward(x, gamma, beta, eps, rms, nullptr, /*write_y=*/true, opt.known_amax);
      *y_fp8 = cast->scaling->quantize(cast->slot, CastSource::tensor(r.y), opt);
    }
    ctx->save_for_backward({x, gamma, beta, r.mean, r.rstd});
    ctx->saved_data["rms"] = rms;
    if (carrier) return nan_carrier(x.sizes(), x.options().dtype(static_cast<at::ScalarType>(carrier_dtype)));
    return r.y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool rms = ctx->saved_data["rms"].toBool();
    NormBackwardResult r =
        backend_for(grads[0].device()).norm_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], rms);
    return {r.grad_x, r.grad_gamma, r.grad_beta, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

Fp8Norm::Fp8Norm(const model::Norm& src, std::shared_ptr<Fp8Linear> consumer)
    : kind(src.kind), dim(src.dim), eps(src.eps), consumer_(std::move(consumer)) {
  weight = register_parameter("weight", src.weight);
  if (src.bias.defined()) bias = register_parameter("bias", src.bias);
}

at::Tensor Fp8Norm::forward(const at::Tensor& x) {
  const bool training = is_training() && at::GradMode::is_enabled();
  const bool rms = kind == model::Norm::Kind::kRMSNorm;
  Scaling& scaling = consumer_->scaling();
  const NormCast cast{&scaling, consumer_->slot_input(), training, consumer_->needs_input_columnwise(training),
                      scaling.fused_cast_slot(consumer_->slot_input(), training)};
  // Statistics of a cast made in the norm kernel are taken here, from y; a recipe that casts y
  // itself takes them in its quantize().
  const bool stats = cast.fused && training && scaling.collect_stats();
  // When the consumer reads only the FP8 copy, y is not written: a carrier in the dtype the
  // consumer computes in stands for it, so its gradient arrives without a conversion.
  int64_t carrier_dtype = -1;
  if (consumer_->takes_fp8_input_only(training) && !stats) {
    carrier_dtype = static_cast<int64_t>(compat::autocast_dtype_or(x.device().type(), x.scalar_type()));
  }
  Fp8Tensor y_fp8;
  const at::Tensor y = Fp8NormFunction::apply(x.reshape({-1, dim}), weight, optional_tensor(bias), eps, rms, &cast,
                                              &y_fp8, carrier_dtype)
                           .view(x.sizes());
  if (stats) {
    scaling.add_stats(cast.slot, backend_for(x.device()).saturation_stats(y.reshape({-1, dim}), *cast.fused));
  }
  consumer_->set_pending_input(y, std::move(y_fp8));
  return y;
}

}  // namespace fp8
}  // namespace fp8t
