// A grouped Linear in high precision: y[rows of g] = x[rows of g] W_gᵀ for the row groups of x
// (lib/model/layers.h GroupedLinear: a mixture of experts' experts; FP8 runs replace it with
// fp8::Fp8GroupedLinear). On CUDA one grouped GEMM (at::_grouped_mm) in the autocast dtype, the
// group sizes read on the device only; elsewhere one at::mm per group, the offsets read on the host.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t {
namespace ops {

// x [M, K], weight [G, N, K], offsets int32 [G] (the end row of each group, the last = M) -> [M, N].
at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& offsets);

// The same one group at a time on the host's view of the offsets (the CPU path, and the tests'
// reference): at::mm of each group's rows with its weight, in x's dtype.
at::Tensor grouped_linear_per_group(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& offsets);

}  // namespace ops
}  // namespace fp8t
