// The CUDA path of ops::add_norm: an autograd node over fp8t_add_norm_forward / _backward
// (kernels/norm_*.cu). Only work on the current LibTorch CUDA stream is enqueued. Saved for the
// backward: r (float32), the weight and bias, mean and rstd; neither x nor h.
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard
#include <torch/torch.h>         // torch::autograd::Function

#include <optional>  // std::optional

#include "fp8t_kernels.h"           // fp8t_add_norm_forward / _backward
#include "lib/ops/add_norm.h"
#include "lib/util/cuda_tensors.h"  // stream_of, floats_on, bytes_on, dtype_code, FP8T_KERNEL_CHECK

namespace fp8t {
namespace ops {

namespace {

using cuda::bytes_on;
using cuda::dtype_code;
using cuda::floats_on;
using cuda::stream_of;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int code_of(at::ScalarType t) { return t == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16; }

class AddNormFunction : public torch::autograd::Function<AddNormFunction> {
 public:
  // x [rows, cols] float32, h of its shape; optional tensors go in as std::optional (LibTorch's
  // custom functions reject undefined inputs).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias_opt, double eps, bool rms, int64_t y_dtype) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), cols = x.size(1);
    const at::Tensor g = weight.to(floats_on(x)).contiguous();
    const at::Tensor b = !rms && bias_opt ? bias_opt->to(floats_on(x)).contiguous() : at::Tensor();
    at::Tensor r = at::empty_like(x);
    at::Tensor y = at::empty({rows, cols}, x.options().dtype(static_cast<at::ScalarType>(y_dtype)));
    at::Tensor rstd = at::empty({rows}, floats_on(x));
    at::Tensor mean = rms ? at::Tensor() : at::empty({rows}, floats_on(x));
    FP8T_KERNEL_CHECK(fp8t_add_norm_forward(x.data_ptr<float>(), h.data_ptr(), dtype_code(h), rows, cols,
                                            r.data_ptr<float>(), g.data_ptr<float>(),
                                            b.defined() ? b.data_ptr<float>() : nullptr, static_cast<float>(eps),
                                            rms ? 1 : 0, y.data_ptr(), code_of(y.scalar_type()),
                                            rms ? nullptr : mean.data_ptr<float>(), rstd.data_ptr<float>(), nullptr,
                                            FP8T_FORMAT_E4M3, nullptr, nullptr, nullptr, stream_of(x)),
                      rms ? "RMSNorm" : "LayerNorm", " of x + h, ", x.sizes(), " h ", h.scalar_type(), " y ",
                      y.scalar_type());
    ctx->set_materialize_grads(false);  // r's gradient is undefined where r has no other use
    ctx->save_for_backward({r, weight, bias_opt.value_or(at::Tensor()), mean, rstd});
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["h_dtype"] = static_cast<int64_t>(h.scalar_type());
    return {r, y};
  }

  // grads[0]: the gradient arriving at r from its other use; grads[1]: y's.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const at::Tensor &r = s[0], &weight = s[1], &bias = s[2], &mean = s[3], &rstd = s[4];
    const bool rms = ctx->saved_data["rms"].toBool();
    const auto h_dtype = static_cast<at::ScalarType>(ctx->saved_data["h_dtype"].toInt());
    const c10::cuda::CUDAGuard guard(r.device());
    const int64_t rows = r.size(0), cols = r.size(1);
    at::Tensor dy = grads[1].defined() ? grads[1] : at::zeros_like(r);
    if (dy.scalar_type() != at::kFloat && dy.scalar_type() != at::kBFloat16) dy = dy.to(at::kFloat);
    dy = dy.contiguous();
    const at::Tensor dr = grads[0].defined() ? grads[0].to(floats_on(r)).contiguous() : at::Tensor();
    const at::Tensor g = weight.to(floats_on(r)).contiguous();
    at::Tensor dx = at::empty_like(r);
    // An FP32 h takes x's gradient itself (as autograd's add does).
    at::Tensor dh = h_dtype == at::kBFloat16 ? at::empty(r.sizes(), r.options().dtype(at::kBFloat16)) : at::Tensor();
    at::Tensor dgamma = at::empty({cols}, floats_on(r));
    at::Tensor dbeta = bias.defined() && !rms ? at::empty({cols}, floats_on(r)) : at::Tensor();
    at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_norm_backward_workspace_bytes(rows, cols))}, bytes_on(r));
    FP8T_KERNEL_CHECK(fp8t_add_norm_backward(dy.data_ptr(), dtype_code(dy), r.data_ptr<float>(),
                                             dr.defined() ? dr.data_ptr<float>() : nullptr, rows, cols,
                                             g.data_ptr<float>(), rms ? nullptr : mean.data_ptr<float>(),
                                             rstd.data_ptr<float>(), rms ? 1 : 0, dx.data_ptr<float>(),
                                             dh.defined() ? dh.data_ptr() : nullptr, FP8T_DTYPE_BF16,
                                             dgamma.data_ptr<float>(), dbeta.defined() ? dbeta.data_ptr<float>() : nullptr,
                                             ws.data_ptr(), stream_of(r)),
                      rms ? "RMSNorm" : "LayerNorm", " backward of x + h, ", r.sizes(), " dy ", dy.scalar_type());
    if (!dh.defined()) dh = dx.to(h_dtype);
    return {dx, dh, dgamma.to(weight.scalar_type()), dbeta.defined() ? dbeta.to(bias.scalar_type()) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace detail {

AddNormResult add_norm_cuda(const at::Tensor& x, const at::Tensor& h, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, bool rms, at::ScalarType y_dtype) {
  const int64_t cols = x.size(-1);
  const variable_list ry =
      AddNormFunction::apply(x.reshape({-1, cols}).contiguous(), h.reshape({-1, cols}).contiguous(), weight,
                             bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt, eps, rms,
                             static_cast<int64_t>(y_dtype));
  return {ry[0].view(x.sizes()), ry[1].view(x.sizes())};
}

}  // namespace detail

}  // namespace ops
}  // namespace fp8t
