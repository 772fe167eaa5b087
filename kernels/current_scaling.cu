// Current scaling: the per-tensor scale of one cast from the amax of the tensor being cast, on the
// device (no host synchronisation between the amax pass and the cast that reads the scale).
//
// The arithmetic is lib/numerics/scaling_math.h current_scale (shared with the CPU backend); this file
// only runs it in one thread: for casts whose producer handed over its amax (the norm). An amax
// pass computes its scale in its own launch (kernels/amax.cu).
#include "fp8t_kernels.h"               // the C API
#include "lib/numerics/scaling_math.h"  // fp8t::fp8::current_scale
#include "precondition.cuh"             // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

__global__ void current_scale_kernel(const float* amax, float fp8_max, float two_pow_margin, float* scale,
                                     float* scale_inv, float* amax_copy) {
  const float a = *amax;
  if (amax_copy != nullptr) *amax_copy = a;
  const float s = fp8t::fp8::current_scale(a, fp8_max, two_pow_margin);
  *scale = s;
  *scale_inv = 1.0f / s;
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_current_scale(const float* amax, float fp8_max, float two_pow_margin, float* scale,
                                          float* scale_inv, float* amax_copy, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_current_scale");
  FP8T_KERNEL_REQUIRE(amax != nullptr && scale != nullptr && scale_inv != nullptr, "no amax, scale or scale_inv");
  FP8T_KERNEL_REQUIRE(fp8_max > 0.0f && two_pow_margin > 0.0f, "fp8_max or 2^margin is not positive");
  current_scale_kernel<<<1, 1, 0, stream>>>(amax, fp8_max, two_pow_margin, scale, scale_inv, amax_copy);
  return cudaGetLastError();
}
