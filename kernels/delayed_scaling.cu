// Delayed-scaling update of every FP8 slot of the model in one launch.
//
// The arithmetic is lib/numerics/scaling_math.h (shared with the CPU backend); this file only maps
// slots onto threads. One thread per slot: the history walk is strided across slots, so
// consecutive threads read consecutive floats of each history row (coalesced).
#include "fp8t_kernels.h"               // the C API
#include "lib/numerics/scaling_math.h"  // fp8t::fp8::update_slot
#include "precondition.cuh"             // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

__global__ void delayed_scaling_update_kernel(float* history, float* scale, float* scale_inv,
                                              const float* fp8_max, int n_slots, int history_len,
                                              float two_pow_margin, int use_max, int recompute) {
  const int slot = blockIdx.x * blockDim.x + threadIdx.x;
  if (slot >= n_slots) return;
  fp8t::fp8::update_slot(history + slot, history_len, n_slots, scale + slot, scale_inv + slot,
                         fp8_max[slot], two_pow_margin, use_max != 0, recompute != 0);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_delayed_scaling_update(float* history, float* scale, float* scale_inv,
                                                   const float* fp8_max, int n_slots,
                                                   int history_len, float two_pow_margin,
                                                   int use_max, int recompute, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_delayed_scaling_update");
  FP8T_KERNEL_REQUIRE(n_slots > 0 && history_len > 0, "no slots or an empty history");
  FP8T_KERNEL_REQUIRE(history != nullptr && scale != nullptr && scale_inv != nullptr && fp8_max != nullptr,
                      "no history, scale, scale_inv or fp8_max");
  constexpr int kThreads = 128;
  const int blocks = (n_slots + kThreads - 1) / kThreads;
  delayed_scaling_update_kernel<<<blocks, kThreads, 0, stream>>>(
      history, scale, scale_inv, fp8_max, n_slots, history_len, two_pow_margin, use_max, recompute);
  return cudaGetLastError();
}
