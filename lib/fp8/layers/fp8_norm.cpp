#include "lib/fp8/layers/fp8_norm.h"

#include <torch/torch.h>  // torch::autograd::Function

#include "lib/fp8/layers/fp8_activation.h"  // nan_carrier
#include "lib/util/torch_compat.h"          // compat::autocast_dtype_or

namespace fp8t {
namespace fp8 {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// How the norm's output reaches the consumer's FP8 input slot: cast in the norm kernel with a
// scale known beforehand (`fused`, delayed scaling); when nothing reads y itself (a carrier) and
// the recipe takes its scale from an amax alone (current), a first norm pass for the amax and a
// second over the same input that casts in its kernel (y is never written); else written in high
// precision with its amax computed in the same kernel and then cast by the recipe (block).
struct NormCast {
  Scaling* scaling;
  int slot;
  bool record;
  bool columnwise;                // the consumer's wgrad needs the columnwise copy
  std::optional<SlotRef> fused;   // Scaling::fused_cast_slot
};

// The norm of x (h undefined) or of x + h (Backend::add_norm_forward), with the FP8 copy of y
// cast as `cast` says and returned through *y_fp8. carrier: y itself is not needed (fused casts
// then skip writing it).
NormForwardResult norm_and_cast(const at::Tensor& x, const at::Tensor& h, const at::Tensor& gamma,
                                const at::Tensor& beta, double eps, bool rms, const NormCast& cast, bool carrier,
                                Fp8Tensor* y_fp8) {
  Backend& backend = backend_for(x.device());
  auto norm = [&](const SlotRef* slot, bool write_y, const at::Tensor& y_amax) {
    return h.defined() ? backend.add_norm_forward(x, h, gamma, beta, eps, rms, slot, write_y, y_amax)
                       : backend.norm_forward(x, gamma, beta, eps, rms, slot, write_y, y_amax);
  };
  if (cast.fused) {
    NormForwardResult r = norm(&*cast.fused, /*write_y=*/!carrier, at::Tensor());
    *y_fp8 = std::move(r.y_fp8);
    return r;
  }
  CastOptions opt;
  opt.columnwise = cast.columnwise;
  opt.record = cast.record;
  opt.known_amax = at::zeros({}, x.options().dtype(at::kFloat));
  if (carrier && cast.scaling->scales_from_known_amax() && !cast.scaling->collect_stats()) {
    // The second pass normalises the stored input (x, or r = x + h as the first pass wrote it):
    // the same values and reductions, so the codes are those of a cast of y (fp8t_add_norm_forward).
    NormForwardResult r = norm(nullptr, /*write_y=*/false, opt.known_amax);
    const SlotRef slot = cast.scaling->slot_for_known_amax(cast.slot, opt.known_amax, cast.record);
    *y_fp8 = backend.norm_forward(h.defined() ? r.sum : x, gamma, beta, eps, rms, &slot, /*write_y=*/false).y_fp8;
    return r;
  }
  NormForwardResult r = norm(nullptr, /*write_y=*/true, opt.known_amax);
  *y_fp8 = cast.scaling->quantize(cast.slot, CastSource::tensor(r.y), opt);
  return r;
}

// carrier_dtype >= 0: the forward returns a carrier of that dtype instead of y (the consumer reads
// only y_fp8; see fp8_activation.h), and y is not written at all.
at::Tensor output_or_carrier(const NormForwardResult& r, const at::Tensor& x, int64_t carrier_dtype) {
  if (carrier_dtype < 0) return r.y;
  return nan_carrier(x.sizes(), x.options().dtype(static_cast<at::ScalarType>(carrier_dtype)));
}

// Autograd node of Fp8Norm on 2-D x. The FP8 copy of y is returned through *y_fp8.
class Fp8NormFunction : public torch::autograd::Function<Fp8NormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gamma,
                            const std::optional<at::Tensor>& beta_opt, double eps, bool rms, const NormCast* cast,
                            Fp8Tensor* y_fp8, int64_t carrier_dtype) {
    // Optional tensors go in as std::optional: LibTorch's custom functions reject undefined inputs.
    const at::Tensor beta = beta_opt.value_or(at::Tensor());
    const NormForwardResult r = norm_and_cast(x, at::Tensor(), gamma, beta, eps, rms, *cast, carrier_dtype >= 0, y_fp8);
    ctx->save_for_backward({x, gamma, beta, r.mean, r.rstd});
    ctx->saved_data["rms"] = rms;
    return output_or_carrier(r, x, carrier_dtype);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool rms = ctx->saved_data["rms"].toBool();
    NormBackwardResult r =
        backend_for(grads[0].device()).norm_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], rms);
    return {r.grad_x, r.grad_gamma, r.grad_beta, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

// Autograd node of Fp8Norm::forward_add on 2-D x (float32) and h: outputs r = x + h and y (or a
// carrier). Only r is kept for the backward (x and h are not).
class Fp8AddNormFunction : public torch::autograd::Function<Fp8AddNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h, const at::Tensor& gamma,
                               const std::optional<at::Tensor>& beta_opt, double eps, bool rms, const NormCast* cast,
                               Fp8Tensor* y_fp8, int64_t carrier_dtype) {
    const at::Tensor beta = beta_opt.value_or(at::Tensor());
    const NormForwardResult r = norm_and_cast(x, h, gamma, beta, eps, rms, *cast, carrier_dtype >= 0, y_fp8);
    // r's gradient may be undefined (r unused, e.g. before the final norm): no zeros are made for it.
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({r.sum, gamma, beta, r.mean, r.rstd});
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["h_dtype"] = static_cast<int64_t>(h.scalar_type());
    return {r.sum, output_or_carrier(r, x, carrier_dtype)};
  }

  // grads[0]: the gradient arriving at r from its other use; grads[1]: the norm output's.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool rms = ctx->saved_data["rms"].toBool();
    const auto h_dtype = static_cast<at::ScalarType>(ctx->saved_data["h_dtype"].toInt());
    const at::Tensor dy = grads[1].defined() ? grads[1].contiguous() : at::zeros_like(s[0]);
    NormBackwardResult r =
        backend_for(s[0].device()).add_norm_backward(dy, grads[0], s[0], s[1], s[2], s[3], s[4], rms, h_dtype);
    return {r.grad_x, r.grad_h, r.grad_gamma, r.grad_beta, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

Fp8Norm::Fp8Norm(const model::Norm& src, std::shared_ptr<Fp8Linear> consumer)
    : kind(src.kind), dim(src.dim), eps(src.eps), consumer_(std::move(consumer)) {
  weight = register_parameter("weight", src.weight);
  if (src.bias.defined()) bias = register_parameter("bias", src.bias);
}

at::Tensor Fp8Norm::forward(const at::Tensor& x) { return run(x, at::Tensor()).y; }

model::AddNormOutput Fp8Norm::forward_add(const at::Tensor& x, const at::Tensor& h) {
  const bool fusable = x.scalar_type() == at::kFloat && at::isFloatingType(h.scalar_type()) &&
                       h.sizes() == x.sizes() && h.device() == x.device();
  if (fusable) return run(x, h);
  const at::Tensor r = x + h;
  return {r, run(r, at::Tensor()).y};
}

model::AddNormOutput Fp8Norm::run(const at::Tensor& x, const at::Tensor& h) {
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
  model::AddNormOutput out;
  if (h.defined()) {
    const variable_list ry = Fp8AddNormFunction::apply(x.reshape({-1, dim}), h.reshape({-1, dim}), weight,
                                                       optional_tensor(bias), eps, rms, &cast, &y_fp8, carrier_dtype);
    out.sum = ry[0].view(x.sizes());
    out.y = ry[1].view(x.sizes());
  } else {
    out.y = Fp8NormFunction::apply(x.reshape({-1, dim}), weight, optional_tensor(bias), eps, rms, &cast, &y_fp8,
                                   carrier_dtype)
                .view(x.sizes());
  }
  if (stats) {
    scaling.add_stats(cast.slot, backend_for(x.device()).saturation_stats(out.y.reshape({-1, dim}), *cast.fused));
  }
  consumer_->set_pending_input(out.y, std::move(y_fp8));
  return out;
}

}  // namespace fp8
}  // namespace fp8t
