// The arithmetic of row-wise scaling (the recipe torchao and torchtitan call "rowwise"), written
// once for host and device: the CPU emulation (lib/fp8/backends/rowwise_cpu.cpp) and the CUDA
// kernels (kernels/rowwise_quantize.cu) compute every scale with this function, and the [cuda]
// tests prove the two bit-equal.
//
// An operand [rows, K] of a GEMM out = A·Bᵀ gets one FP32 scale per row, from the row's amax over
// K (cuBLASLt's OUTER_VEC_32F reads one factor per row of A and one per row of B). A row's scale is
// a block scale (block_math.h) whose block is the whole row, with power-of-2 rounding always:
//   amax  = max |x| over the row; NaN elements are ignored, +-inf counts (amax_combine);
//   scale = 1 when amax is 0, inf or NaN; else fp8_max / amax in float32, the input dtype's
//           largest finite value when that overflows, rounded DOWN to a power of two (so
//           amax * scale lies in (fp8_max/2, fp8_max] and dequantisation is exact);
//   scale_inv = 1 / scale (exact).
// torchao's rowwise recipe clamps amax at 1e-12 instead of mapping 0 to scale 1: an all-zero row
// gets codes 0 either way; the scale_inv differs, the product does not.
//
// Plain C++ (no LibTorch): kernels/ include it.
#pragma once

#include "lib/numerics/block_math.h"  // block_scale_from_amax, block_value_for_inf
#include "lib/numerics/format.h"      // FP8T_HOST_DEVICE, kE4M3Max

namespace fp8t {
namespace fp8 {

// The scale of one row (E4M3) from its amax; bf16_input picks the overflow value (block_math.h).
FP8T_HOST_DEVICE float row_scale_from_amax(float amax, bool bf16_input) {
  return block_scale_from_amax(amax, kE4M3Max, /*power_of_2=*/true, block_value_for_inf(bf16_input));
}

}  // namespace fp8
}  // namespace fp8t
