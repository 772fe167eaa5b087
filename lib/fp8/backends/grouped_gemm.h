// The grouped FP8 GEMMs on CUDA (Backend::grouped_gemm / grouped_gemm_wgrad, backend.h): LibTorch's
// own at::_scaled_grouped_mm, the FP8 row-wise grouped GEMM of Hopper (a CUTLASS kernel; the one
// torchao's MoE training uses). It takes E4M3 operands, one FP32 scale per row of each operand and
// the group ends on the device; a per-tensor scale goes in as a constant vector. The output is BF16.
// No host read: the step stays one CUDA graph. Only in builds with FP8T_WITH_CUDA.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include "lib/fp8/backends/backend.h"  // Fp8Operand

namespace fp8t {
namespace fp8 {

#if defined(FP8T_WITH_CUDA)
at::Tensor grouped_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                             at::ScalarType out_dtype, bool fast_accum, GroupedOperands stacked);
at::Tensor grouped_gemm_wgrad_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                   bool fast_accum);
#endif

}  // namespace fp8
}  // namespace fp8t
