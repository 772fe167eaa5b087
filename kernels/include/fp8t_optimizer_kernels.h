// fp8train CUDA kernels of the optimizer (kernels/adamw.cu): the C API, in the conventions of
// fp8t_kernels.h (launch on `stream`, checked preconditions named by fp8t_last_precondition(),
// device pointers unless said otherwise).
#pragma once

#include "fp8t_kernels.h"  // cudaStream_t, cudaError_t, int64_t

#ifdef __cplusplus
extern "C" {
#endif

// ---- AdamW over many tensors (kernels/adamw.cu) ----------------------------------------------
// One AdamW step of n_tensors parameters whose moments are stored as float32
// (fp8t_adamw_fp32_moments; train.moments_dtype: fp32) or as bfloat16 (fp8t_adamw_bf16_moments;
// bf16), each element by lib/numerics/adamw_math.h update_element (FP32 math, bias corrections from
// the running products in the parameter's state), so the CPU loop over that header gives the same
// bits. Per tensor i (the arrays are HOST arrays of device pointers, read during the call and
// passed to the kernels by value: a captured CUDA graph replays the same pointers, no host-to-
// device copy):
//   params[i]      float32 [numels[i]], updated in place
//   grads[i]       float32 [numels[i]] (read only)
//   exp_avgs[i], exp_avg_sqs[i]  float32, or bfloat16 bits, [numels[i]], updated in place
//   states[i]      float32 [3] = {t, beta1^t, beta2^t}, advanced by one step first
// Any element alignment (16-byte vector accesses per tensor when its four arrays allow them).
// lr: float32 on the device, or null to use lr_value. grad_scale (nullable): every gradient is
// divided by it. found_inf (nullable): when it holds 1.0 nothing is written (states included).
// beta1, beta2, eps and weight_decay are the options rounded to float32. Tensors beyond one
// launch's capacity go to further launches (two per up to 48 tensors); numels[i] == 0 only
// advances the state.
cudaError_t fp8t_adamw_fp32_moments(int n_tensors, float* const* params, const float* const* grads,
                                    float* const* exp_avgs, float* const* exp_avg_sqs, float* const* states,
                                    const int64_t* numels, const float* lr, float lr_value, float beta1, float beta2,
                                    float eps, float weight_decay, const float* grad_scale, const float* found_inf,
                                    cudaStream_t stream);
cudaError_t fp8t_adamw_bf16_moments(int n_tensors, float* const* params, const float* const* grads,
                                    uint16_t* const* exp_avgs, uint16_t* const* exp_avg_sqs,
                                    float* const* states, const int64_t* numels, const float* lr,
                                    float lr_value, float beta1, float beta2, float eps, float weight_decay,
                                    const float* grad_scale, const float* found_inf, cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif
