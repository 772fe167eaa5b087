// The row-wise recipe's casts and GEMMs as the backends' operands (backend.h): one FP32 scale per
// row of a GEMM operand (ScaleLayout::kRowwise), E4M3, scales from lib/numerics/rowwise_math.h.
// The CPU emulation (rowwise_cpu.cpp) and the GPU (rowwise_cuda.cpp over
// kernels/rowwise_quantize.cu) give the same codes and scales, bit for bit; the GEMM is FP32 on the
// dequantized operands on the CPU and cuBLASLt's OUTER_VEC_32F mode on the GPU.
//
// A cast of x [rows, K]:
//   rowwise:    codes [rows, K], scale_inv [rows]: one scale per row (its amax over K);
//   columnwise: codes [K, rows] (the transpose), scale_inv [K]: one scale per column of x (its amax
//               over the rows), cast from x itself: a row-scaled tensor cannot be transposed.
// The Linear's GEMMs (out = A·Bᵀ): fprop x (per token) · W (per output feature); dgrad dy (per
// token) · Wᵀ (per input feature: W's columnwise copy); wgrad dyᵀ · xᵀ (per feature, amaxes over
// the tokens: both columnwise copies).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <utility>  // std::move

#include "lib/fp8/backends/backend.h"  // Fp8Tensor, Fp8Operand, ScaleLayout, GemmKind, CastSource

namespace fp8t {
namespace fp8 {

// The cast of x (2-D, any float dtype; fp16/fp64 are cast as fp32) on x's device in the asked
// layouts, as E4M3 operands with scale_layout kRowwise.
Fp8Tensor rowwise_quantize(const at::Tensor& x, bool rowwise, bool columnwise);
Fp8Tensor rowwise_quantize_cpu(const at::Tensor& x, bool rowwise, bool columnwise);
#if defined(FP8T_WITH_CUDA)
Fp8Tensor rowwise_quantize_cuda(const at::Tensor& x, bool rowwise, bool columnwise);
#endif

// The cast of a cast source (backend.h): its value computed with LibTorch (materialize), then
// cast; *dbias = the value's column sums in FP32 when dbias is given. Gradient sources (and a
// plain tensor with dbias) give both layouts.
Fp8Tensor rowwise_quantize_source(const CastSource& src, bool rowwise, bool columnwise, at::Tensor* dbias);

// Whether an operand carries row scales.
inline bool is_row_scaled(const Fp8Operand& op) { return op.scale_layout == ScaleLayout::kRowwise; }

// An E4M3 operand of codes [rows, K] with its row scales' inverses [rows].
inline Fp8Operand rowwise_operand(at::Tensor codes, at::Tensor scale_inv) {
  Fp8Operand op;
  op.codes = std::move(codes);
  op.scale_inv = std::move(scale_inv);
  op.format = Format::kE4M3;
  op.scale_layout = ScaleLayout::kRowwise;
  return op;
}

// decode(codes) * scale_inv of the row, float32 [rows, K] on the codes' device (the CPU
// emulation's GEMM operands; the tests' references).
at::Tensor rowwise_dequantize(const Fp8Operand& op);

// out[M,N] = dequant(a)[M,K] · dequant(b)[N,K]ᵀ (+ bias[N]) for row-scaled operands (both), on
// their device: FP32 GEMM of the dequantized operands on the CPU (exact products; an FP32 sum for
// the tensor cores' accumulator), the cuBLASLt OUTER_VEC_32F GEMM on CUDA (fast_accum as asked).
at::Tensor rowwise_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype,
                        GemmKind kind, bool fast_accum);
#if defined(FP8T_WITH_CUDA)
at::Tensor rowwise_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                             at::ScalarType out_dtype, GemmKind kind, bool fast_accum);
#endif

// FP8 health statistics of a row-wise cast of x (one layout: q is x's rowwise operand): float32
// [5] on x's device = {fraction of elements that saturate (|x * scale| > 448), fraction of non-zero
// elements whose code is +-0, smallest row scale, largest row scale, max|x| (NaN ignored)}.
at::Tensor rowwise_cast_stats(const at::Tensor& x, const Fp8Operand& q);

}  // namespace fp8
}  // namespace fp8t
