// fp8train CUDA kernels: a small C-style API over kernels/*.cu (no LibTorch here).
//
// Conventions: every function launches on `stream`, checks its preconditions and the launch
// status, and returns a cudaError_t (cudaSuccess, cudaErrorInvalidValue for a violated
// precondition, or the launch error). Pointers are device pointers. FP8 data are uint8 codes
// (lib/fp8/format.h). "amax" arguments are single floats that the kernel max-accumulates
// into (NaN-propagating, fp8::amax_combine); "scale" is read on the device (no host reads).
#pragma once

#include <cuda_runtime.h>  // cudaStream_t, cudaError_t
#include <stdint.h>        // uint8_t

#ifdef __cplusplus
extern "C" {
#endif

// ---- delayed scaling (kernels/delayed_scaling.cu) -----------------------------------------
// One update of all n_slots slots in one launch: scaling_math.h update_slot() per slot.
// history: [history_len, n_slots] row-major; scale, scale_inv, fp8_max: [n_slots].
cudaError_t fp8t_delayed_scaling_update(float* history, float* scale, float* scale_inv,
                                        const float* fp8_max, int n_slots, int history_len,
                                        float two_pow_margin, int use_max, int recompute,
                                        cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif
