// The CUDA half of lib/optim/adamw_step.h: hands the tensors' pointers to kernels/adamw.cu.
#include "lib/optim/adamw_step.h"

#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include <cstdint>  // int64_t, uint16_t
#include <vector>   // std::vector

#include "fp8t_optimizer_kernels.h"  // fp8t_adamw_fp32_moments, fp8t_adamw_bf16_moments
#include "lib/util/cuda_tensors.h"   // stream_of, FP8T_KERNEL_CHECK
#include "lib/util/error.h"          // FP8T_CHECK

namespace fp8t::optim {
namespace {

// A device scalar argument (null when not given): a 0-d float32 on the parameters' device.
// `keep` holds a converted copy alive until the launch is queued.
const float* device_scalar(const at::Tensor& t, const at::Device& device, at::Tensor& keep) {
  if (!t.defined()) return nullptr;
  keep = t.to(device, at::kFloat).contiguous();
  FP8T_CHECK(keep.numel() == 1, "AdamW: lr, grad_scale and found_inf must be single values");
  return keep.data_ptr<float>();
}

}  // namespace

void adamw_multi_tensor_step_cuda(const AdamWBatch& b, const AdamWStepArgs& a) {
  const at::Device device = b.params.front().device();
  const c10::cuda::CUDAGuard guard(device);
  const size_t n = b.params.size();
  const bool bf16 = b.exp_avgs.front().scalar_type() == at::kBFloat16;
  std::vector<float*> params(n), states(n), exp_avgs(n), exp_avg_sqs(n);
  std::vector<uint16_t*> exp_avgs_bf16(n), exp_avg_sqs_bf16(n);
  std::vector<const float*> grads(n);
  std::vector<int64_t> numels(n);
  for (size_t i = 0; i < n; ++i) {
    FP8T_CHECK(b.params[i].device() == device && b.grads[i].device() == device && b.exp_avgs[i].device() == device &&
                   b.exp_avg_sqs[i].device() == device && b.states[i].device() == device,
               "AdamW: the tensors of one update must share a device");
    params[i] = b.params[i].data_ptr<float>();
    grads[i] = b.grads[i].data_ptr<float>();
    if (bf16) {
      exp_avgs_bf16[i] = reinterpret_cast<uint16_t*>(b.exp_avgs[i].data_ptr<at::BFloat16>());
      exp_avg_sqs_bf16[i] = reinterpret_cast<uint16_t*>(b.exp_avg_sqs[i].data_ptr<at::BFloat16>());
    } else {
      exp_avgs[i] = b.exp_avgs[i].data_ptr<float>();
      exp_avg_sqs[i] = b.exp_avg_sqs[i].data_ptr<float>();
    }
    states[i] = b.states[i].data_ptr<float>();
    numels[i] = b.params[i].numel();
  }
  at::Tensor lr_keep, scale_keep, inf_keep;
  const float* lr = device_scalar(a.lr, device, lr_keep);
  const float* grad_scale = device_scalar(a.grad_scale, device, scale_keep);
  const float* found_inf = device_scalar(a.found_inf, device, inf_keep);
  const cudaStream_t stream = cuda::stream_of(b.params.front());
  const int count = static_cast<int>(n);
  if (bf16) {
    FP8T_KERNEL_CHECK(fp8t_adamw_bf16_moments(count, params.data(), grads.data(), exp_avgs_bf16.data(),
                                              exp_avg_sqs_bf16.data(), states.data(), numels.data(), lr, a.lr_value,
                                              a.beta1, a.beta2, a.eps, a.weight_decay, grad_scale, found_inf, stream),
                      "AdamW with bf16 moments over ", n, " tensors");
  } else {
    FP8T_KERNEL_CHECK(fp8t_adamw_fp32_moments(count, params.data(), grads.data(), exp_avgs.data(),
                                              exp_avg_sqs.data(), states.data(), numels.data(), lr, a.lr_value,
                                              a.beta1, a.beta2, a.eps, a.weight_decay, grad_scale, found_inf, stream),
                      "AdamW with fp32 moments over ", n, " tensors");
  }
}

}  // namespace fp8t::optim
