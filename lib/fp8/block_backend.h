// The block recipe's casts and GEMMs as the backends' operands (backend.h): what CpuBackend and
// CudaBackend run for Fp8Operands whose scale_layout is a block layout. Casts: block_quantize.h;
// GEMMs: FP32 on the dequantized operands on the CPU (the emulation), lib/gemm's block-scaled
// cuBLASLt GEMM on CUDA (block_backend_cuda.cpp).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include "lib/fp8/backend.h"  // Fp8Tensor, Fp8Operand, ScaleLayout, GemmKind

namespace fp8t {
namespace fp8 {

// The block cast of x (block_rows 1: 1x128, 128: 128x128) on x's device, as E4M3 operands with
// scale_layout kBlock1x128 / kBlock128x128.
Fp8Tensor block_quantize_operands(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise,
                                  bool power_of_2);

// Whether an operand carries block scales.
inline bool is_block_scaled(const Fp8Operand& op) { return op.scale_layout != ScaleLayout::kTensor; }

// out[M,N] = dequant(a)[M,K] · dequant(b)[N,K]ᵀ (+ bias[N]) for block-scaled operands, on their
// device: the CPU emulation (FP32 GEMM of the operands dequantized with their block scales) or the
// cuBLASLt block-scaled GEMM. 128x128 x 128x128 is refused on both (cuBLASLt has no such mode).
at::Tensor block_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype,
                      GemmKind kind);
#if defined(FP8T_WITH_CUDA)
at::Tensor block_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                           at::ScalarType out_dtype, GemmKind kind);
#endif

}  // namespace fp8
}  // namespace fp8t
