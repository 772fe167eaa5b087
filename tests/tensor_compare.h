// Relative error of a tensor against a reference, in float64 on the CPU (either may live on the GPU).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t::test {

// ||a - ref|| / ||ref|| in the Frobenius norm.
inline double rel_err(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor a64 = a.detach().cpu().to(at::kDouble), r64 = ref.detach().cpu().to(at::kDouble);
  return ((a64 - r64).norm() / r64.norm()).item<double>();
}

}  // namespace fp8t::test
