// The RMSNorm formula, written once: the plain model's Norm (lib/model/layers.cpp) and the FP8 CPU
// emulation (lib/fp8/backends/cpu_backend.cpp) both call rms_norm(), so an FP8 norm on the CPU computes
// bit for bit what the unconverted model computes. kernels/norm_*.cu evaluates the same expression
// per row on the GPU (y = x * rstd * gamma in FP32, rounded once to x's dtype).
#pragma once

#include <ATen/ATen.h>  // at::Tensor, at::rsqrt

namespace fp8t {
namespace ops {

struct RmsNormOutput {
  at::Tensor y;     // x's shape and dtype
  at::Tensor rstd;  // float32, x's shape with the last dim 1
};

// RMSNorm over the last dim with FP32 statistics: rstd = 1 / sqrt(mean(x^2) + eps) and
// y = x * rstd * weight, computed in FP32 and rounded once to x's dtype. Differentiable.
inline RmsNormOutput rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor rstd = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return {(xf * rstd * weight.to(at::kFloat)).to(x.scalar_type()), rstd};
}

}  // namespace ops
}  // namespace fp8t
