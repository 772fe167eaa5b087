// The CUDA half of lib/train/optimizer_bf16.h: hands the tensors' pointers to kernels/adamw.cu.
#include "lib/train/optimizer_bf16.h"

#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include <cstdint>  // int64_t, uint16_t
#include <vector>   // std::vector

#include "fp8t_optimizer_kernels.h"  // fp8t_adamw_bf16_moments
#include "lib/util/cuda_tensors.h"   // stream_of, FP8T_KERNEL_CHECK
#include "lib/util/error.h"          // FP8T_CHECK

namespace fp8t::train {
namespace {

// A device scalar argument (null when not given): a 0-d float32 on the parameters' device.
// `keep` holds a converted copy alive until the launch is queued.
const float* device_scalar(const at::Tensor& t, const at::Device& device, at::Tensor& keep) {
  if (!t.defined()) return nullptr;
  keep = t.to(device, at::kFloat).contiguous();
  FP8T_CHECK(keep.numel() == 1, "AdamW (bf16 moments): lr, grad_scale and found_inf must be single values");
  return keep.data_ptr<float>();
}

}  // namespace

void adamw_bf16_moments_step_cuda(const Bf16MomentsBatch& b, const Bf16MomentsStep& a) {
  const at::Device device = b.params.front().device();
  const c10::cuda::CUDAGuard guard(device);
  const size_t n = b.params.size();
  std::vector<float*> params(n), states(n);
  std::vector<const float*> grads(n);
  std::vector<uint16_t*> exp_avgs(n), exp_avg_sqs(n);
  std::vector<int64_t> numels(n);
  for (size_t i = 0; i < n; ++i) {
    FP8T_CHECK(b.params[i].device() == device && b.grads[i].device() == device && b.exp_avgs[i].device() == device &&
                   b.exp_avg_sqs[i].device() == device && b.states[i].device() == device,
               "AdamW (bf16 moments): the tensors of one update must share a device");
    params[i] = b.params[i].data_ptr<float>();
    grads[i] = b.grads[i].data_ptr<float>();
    exp_avgs[i] = reinterpret_cast<uint16_t*>(b.exp_avgs[i].data_ptr<at::BFloat16>());
    exp_avg_sqs[i] = reinterpret_cast<uint16_t*>(b.exp_avg_sqs[i].data_ptr<at::BFloat16>());
    states[i] = b.states[i].data_ptr<float>();
    numels[i] = b.params[i].numel();
  }
  at::Tensor lr_keep, scale_keep, inf_keep;
  const float* lr = device_scalar(a.lr, device, lr_keep);
  const float* grad_scale = device_scalar(a.grad_scale, device, scale_keep);
  const float* found_inf = device_scalar(a.found_inf, device, inf_keep);
  FP8T_KERNEL_CHECK(fp8t_adamw_bf16_moments(static_cast<int>(n), params.data(), grads.data(), exp_avgs.data(),
                                            exp_avg_sqs.data(), states.data(), numels.data(), lr, a.lr_value, a.beta1,
                                            a.beta2, a.eps, a.weight_decay, grad_scale, found_inf,
                                            cuda::stream_of(b.params.front())),
                    "AdamW with bf16 moments over ", n, " tensors");
}

}  // namespace fp8t::train
