// The block recipe's casts and GEMMs as the backends' operands (backend.h): what CpuBackend and
// CudaBackend run for Fp8Operands whose scale_layout is a block layout. Casts: block_quantize.h;
// GEMMs: FP32 on the dequantized operands on the CPU (the emulation), lib/gemm's block-scaled
// cuBLASLt GEMM on CUDA (block_backend_cuda.cpp).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <optional>  // std::optional

#include "lib/fp8/backends/backend.h"         // Fp8Tensor, Fp8Operand, ScaleLayout, GemmKind, CastSource
#include "lib/fp8/backends/block_quantize.h"  // BlockQuantized

namespace fp8t {
namespace fp8 {

// The block cast of x (block_rows 1: 1x128, 128: 128x128) on x's device, as E4M3 operands with
// scale_layout kBlock1x128 / kBlock128x128.
Fp8Tensor block_quantize_operands(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise,
                                  bool power_of_2);

// The block cast of a cast source (backend.h), with *dbias = the column sums of its value in
// FP32 when dbias is given. On CUDA the 1x128 casts of x, gelu(h) and the GELU backward (fp32 or
// bf16) run in one kernel that evaluates the value without writing it in high precision
// (block_quantize_act_cuda); anything else (the CPU emulation, 128x128 blocks, SwiGLU sources,
// fp16 activations) materializes the value with LibTorch and casts that.
Fp8Tensor block_quantize_source(const CastSource& src, int block_rows, bool rowwise, bool columnwise,
                                bool power_of_2, at::Tensor* dbias);
#if defined(FP8T_WITH_CUDA)
// The fused CUDA cast of block_quantize_source, or nullopt when the source has none.
std::optional<Fp8Tensor> block_quantize_source_cuda(const CastSource& src, int block_rows, bool rowwise,
                                                    bool columnwise, bool power_of_2, at::Tensor* dbias);
#endif

// A block cast's layouts as E4M3 operands with scale_layout kBlock1x128 / kBlock128x128.
Fp8Tensor block_operands(BlockQuantized q, int block_rows);

// Whether an operand carries block scales (1x128 or 128x128).
inline bool is_block_scaled(const Fp8Operand& op) {
  return op.scale_layout == ScaleLayout::kBlock1x128 || op.scale_layout == ScaleLayout::kBlock128x128;
}

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
