// The residual add fused into the norm after it, for the plain (not FP8) model on CUDA: one kernel
// (kernels/norm_*.cu) computes r = x + h and the LayerNorm/RMSNorm of r, and one kernel its backward
// with the sum of r's gradient inside. Used by model::Norm::forward_add; other devices and dtypes
// run x + h and the norm unfused (add_norm_fused says which).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t {
namespace ops {

struct AddNormResult {
  at::Tensor sum;  // r = x + h, float32, x's shape
  at::Tensor y;    // the norm of r in y_dtype, x's shape
};

// True when add_norm runs fused for these arguments: a CUDA build, x float32 on a CUDA device, h
// float32 or bfloat16 of x's shape on that device, y_dtype float32 or bfloat16.
bool add_norm_fused(const at::Tensor& x, const at::Tensor& h, at::ScalarType y_dtype);

// r = x + h (the FP32 sum an unfused x + h gives) and y = the norm of r over the last dim with
// FP32 statistics, rounded once to y_dtype: LayerNorm (mean, biased variance, weight, optional
// bias) or, with rms, RMSNorm (weight only). Differentiable in x, h, weight and bias: the backward
// adds r's gradient from its other use into the norm's and returns it for x (float32) and h (in
// h's dtype). Requires add_norm_fused(x, h, y_dtype). The reductions are the FP8 norm's kernel's
// (two-pass variance), not ATen's (Welford): y and the gradients agree with at::layer_norm to a
// few FP32 ulps before the rounding to y_dtype.
AddNormResult add_norm(const at::Tensor& x, const at::Tensor& h, const at::Tensor& weight, const at::Tensor& bias,
                       double eps, bool rms, at::ScalarType y_dtype);

#if defined(FP8T_WITH_CUDA)
namespace detail {
// The CUDA path (lib/ops/add_norm_cuda.cpp); arguments checked by add_norm.
AddNormResult add_norm_cuda(const at::Tensor& x, const at::Tensor& h, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, bool rms, at::ScalarType y_dtype);
}  // namespace detail
#endif

}  // namespace ops
}  // namespace fp8t
