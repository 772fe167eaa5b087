// One AdamW update of a list of tensors on one device, by the arithmetic of
// lib/numerics/adamw_math.h, with FP32 or bfloat16 moments (train.moments_dtype). AdamW
// (optimizer.h) collects the tensors; this is the loop over them: on the CPU here
// (adamw_step.cpp), on CUDA through kernels/adamw.cu (adamw_step_cuda.cpp), bit-equal.
#pragma once

#include <vector>  // std::vector

#include <ATen/core/Tensor.h>  // at::Tensor

namespace fp8t::optim {

// The tensors of one update (one device, one weight-decay setting), entry i of each list
// belonging to one parameter:
struct AdamWBatch {
  std::vector<at::Tensor> params;       // float32 contiguous, updated in place (a parameter, a
                                        // range of one, or a master copy)
  std::vector<at::Tensor> grads;        // float32 contiguous, the params' element counts
  std::vector<at::Tensor> exp_avgs;     // float32 or bfloat16 (all alike) contiguous, updated in place
  std::vector<at::Tensor> exp_avg_sqs;  // the exp_avgs' dtype, contiguous, updated in place
  std::vector<at::Tensor> states;       // float32 [3] = {t, beta1^t, beta2^t} (adamw_math.h)
};

struct AdamWStepArgs {
  float beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f, weight_decay = 0.0f;  // the options rounded to float32
  float lr_value = 0.0f;  // the learning rate unless `lr` is given
  at::Tensor lr;          // optional 0-d float32 on the device
  at::Tensor grad_scale;  // optional 0-d float32: gradients are divided by it
  at::Tensor found_inf;   // optional 0-d float32: 1.0 skips the step (nothing changes)
};

// One step of every tensor of `batch` (all on one device).
void adamw_multi_tensor_step(const AdamWBatch& batch, const AdamWStepArgs& step);

#if defined(FP8T_WITH_CUDA)
// The CUDA part (adamw_step_cuda.cpp): one fp8t_adamw_*_moments call, no host sync.
void adamw_multi_tensor_step_cuda(const AdamWBatch& batch, const AdamWStepArgs& step);
#endif

}  // namespace fp8t::optim
