// The arithmetic of block scaling (TransformerEngine's Float8BlockScaling, the DeepSeek-V3
// scheme), written once for host and device: the CPU emulation (lib/fp8/backends/block_cpu.cpp) and the
// CUDA kernels (kernels/block_quantize.cu) compute every block scale with these functions, and the
// [cuda] tests prove the two bit-equal.
//
// A block is 128 consecutive values of a row (1x128: activations and gradients) or a 128x128 tile
// (weights). Its scale follows TE's compute_scale_from_amax
// (transformer_engine/common/recipe/recipe_common.cuh) with TE's default amax_epsilon of 0:
//   amax  = max |x| over the block; NaN elements are ignored, +-inf counts (amax_combine);
//   scale = 1                               when amax is 0 (an all-zero or all-NaN block), inf
//                                           or NaN (TE returns 1 for all three);
//         = fp8_max / amax                  otherwise, one float32 division rounded to nearest;
//         = the input dtype's largest finite value when that division overflows (amax below
//           fp8_max / FLT_MAX, i.e. a block of float32/bf16 subnormals): TE's value_for_inf;
//   power_of_2 (fp8.block_power_of_2_scales, TE's default): the scale is rounded DOWN to a power
//           of two by clearing its mantissa bits, so amax * scale lies in (fp8_max/2, fp8_max]
//           and dequantisation is exact;
//   scale_inv = 1 / scale (float32, rounded to nearest; exact for power-of-2 scales).
// An inf element of a block is cast with scale 1 and saturates to +-448; a NaN element becomes
// the NaN code (lib/numerics/format.h).
//
// Plain C++ (no LibTorch): kernels/ include it.
#pragma once

#include <cfloat>   // FLT_MAX
#include <cstdint>  // int64_t, uint32_t

#include "lib/numerics/format.h"        // FP8T_HOST_DEVICE, detail::float_bits, kE4M3Max
#include "lib/numerics/scaling_math.h"  // amax_combine, is_finite

namespace fp8t {
namespace fp8 {

// Values per block along a dimension (1x128 and 128x128).
constexpr int kBlockLen = 128;

// The largest finite bfloat16 (0x7F7F): TE's value_for_inf for bf16 inputs. FP32 inputs use
// FLT_MAX; FP16 inputs are cast as FP32 (exact), and no FP16 amax can overflow the division.
constexpr float kBf16Max = 3.38953139e38f;

FP8T_HOST_DEVICE float block_value_for_inf(bool bf16_input) { return bf16_input ? kBf16Max : FLT_MAX; }

// The largest power of two <= s for a positive normal float s (clears the mantissa, as TE does).
FP8T_HOST_DEVICE float round_down_pow2(float s) { return detail::bits_float(detail::float_bits(s) & 0xff800000u); }

// The scale of one block from its amax (see the file comment). fp8_max: 448 for E4M3.
FP8T_HOST_DEVICE float block_scale_from_amax(float amax, float fp8_max, bool power_of_2, float value_for_inf) {
  if (!is_finite(amax) || amax == 0.0f) return 1.0f;
#if defined(__CUDA_ARCH__)
  float scale = __fdiv_rn(fp8_max, amax);  // IEEE division also under --use_fast_math
#else
  float scale = fp8_max / amax;
#endif
  if (!is_finite(scale)) scale = value_for_inf;
  return power_of_2 ? round_down_pow2(scale) : scale;
}

FP8T_HOST_DEVICE float block_scale_inv(float scale) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(1.0f, scale);
#else
  return 1.0f / scale;
#endif
}

// The health test of block scaling: the scaled value exceeds the format's largest finite value,
// so the cast clips it. Unlike the per-tensor test (saturation_math.h, >= fp8_max), a block's own
// maximum maps onto fp8_max by design and is not counted; what counts is an inf element, or a
// block whose scale came from value_for_inf. NaN never counts.
FP8T_HOST_DEVICE bool block_saturates(float scaled, float fp8_max) { return scaled > fp8_max || scaled < -fp8_max; }

// ---- layouts (what cuBLASLt's block scale modes read; docs/fp8.md "Block scaling") ----------

FP8T_HOST_DEVICE int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
FP8T_HOST_DEVICE int64_t round_up4(int64_t a) { return (a + 3) / 4 * 4; }

// 1x128 scales of a row-major [rows, cols] operand (blocks along cols): float32
// [ceil(cols/128), round_up4(rows)] row-major, i.e. rows contiguous (CUBLASLT_MATMUL_MATRIX_SCALE_
// VEC128_32F). Padding entries are 0.
FP8T_HOST_DEVICE int64_t vec128_scale_rows(int64_t /*rows*/, int64_t cols) { return ceil_div(cols, kBlockLen); }
FP8T_HOST_DEVICE int64_t vec128_scale_stride(int64_t rows) { return round_up4(rows); }
FP8T_HOST_DEVICE int64_t vec128_scale_index(int64_t row, int64_t col_block, int64_t rows) {
  return col_block * vec128_scale_stride(rows) + row;
}

// 128x128 scales of a row-major [rows, cols] operand: float32 [ceil(rows/128),
// round_up4(ceil(cols/128))] row-major (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F; the row stride
// is padded to 16 bytes). Padding entries are 0.
FP8T_HOST_DEVICE int64_t blk128_scale_rows(int64_t rows) { return ceil_div(rows, kBlockLen); }
FP8T_HOST_DEVICE int64_t blk128_scale_stride(int64_t cols) { return round_up4(ceil_div(cols, kBlockLen)); }
FP8T_HOST_DEVICE int64_t blk128_scale_index(int64_t row_block, int64_t col_block, int64_t cols) {
  return row_block * blk128_scale_stride(cols) + col_block;
}

}  // namespace fp8
}  // namespace fp8t
