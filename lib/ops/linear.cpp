#include "lib/ops/linear.h"

#include <ATen/autocast_mode.h>                 // at::autocast::is_autocast_enabled, get_autocast_dtype
#include <c10/core/DispatchKeySet.h>            // c10::autocast_dispatch_keyset
#include <c10/core/impl/LocalDispatchKeySet.h>  // c10::impl::ExcludeDispatchKeyGuard
#include <torch/torch.h>                        // torch::autograd::Function, GradMode

#include <optional>  // std::optional

namespace fp8t {
namespace ops {
namespace {

// Inputs: x [..., in] (any float dtype), weight [out, in] float32, bias [out] or undefined; dtype:
// the autocast dtype the GEMMs run in. Saves x and W in that dtype, as autocast's linear does.
class Fp32WgradLinearFunction : public torch::autograd::Function<Fp32WgradLinearFunction> {
 public:
  // bias: an optional, not an undefined tensor (autograd records every tensor input's device).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, int64_t dtype_code) {
    const auto dtype = static_cast<at::ScalarType>(dtype_code);
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const at::Tensor xh = x.to(dtype), wh = weight.to(dtype);
    ctx->save_for_backward({xh, wh});
    ctx->saved_data["has_bias"] = bias.has_value();
    return at::linear(xh, wh, bias.has_value() ? bias->to(dtype) : at::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& xh = saved[0];
    const at::Tensor& wh = saved[1];
    const int64_t out = wh.size(0), in = wh.size(1);
    const at::Tensor dy = grads[0].to(wh.scalar_type()).reshape({-1, out});
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = at::mm(dy, wh).view(xh.sizes());  // autograd converts to x's dtype
    if (ctx->needs_input_grad(1)) dw = at::mm(dy.t(), xh.reshape({-1, in}), at::kFloat);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) db = dy.sum(0, false, at::kFloat);
    return {dx, dw, db, at::Tensor()};
  }
};

}  // namespace

bool linear_fp32_wgrad(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.is_cuda() || weight.scalar_type() != at::kFloat || !at::autocast::is_autocast_enabled(at::kCUDA)) {
    return false;
  }
  const at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  return (dtype == at::kBFloat16 || dtype == at::kHalf) && torch::autograd::GradMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad());
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!linear_fp32_wgrad(x, weight)) return at::linear(x, weight, bias);
  const at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  const std::optional<at::Tensor> b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  return Fp32WgradLinearFunction::apply(x, weight, b, static_cast<int64_t>(dtype));
}

}  // namespace ops
}  // namespace fp8t
