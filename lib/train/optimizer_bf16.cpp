#include "lib/train/optimizer_bf16.h"

#include <ATen/ATen.h>      // at::Tensor, at::kCPU
#include <ATen/Parallel.h>  // at::parallel_for

#include <cstdint>  // int64_t, uint16_t

#include "lib/train/adamw_math.h"  // adamw::update_element, advance_state, step_scalars
#include "lib/util/error.h"        // FP8T_CHECK

namespace fp8t::train {
namespace {

// A 0-d float32 tensor's value on the host (CPU tensors: no sync).
float host_value(const at::Tensor& t) { return t.to(at::kCPU, at::kFloat).item<float>(); }

void check_batch(const Bf16MomentsBatch& b) {
  const size_t n = b.params.size();
  FP8T_CHECK(b.grads.size() == n && b.exp_avgs.size() == n && b.exp_avg_sqs.size() == n && b.states.size() == n,
             "AdamW (bf16 moments): the tensor lists differ in length");
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = b.params[i].numel();
    FP8T_CHECK(b.params[i].scalar_type() == at::kFloat && b.params[i].is_contiguous() &&
                   b.grads[i].scalar_type() == at::kFloat && b.grads[i].is_contiguous() && b.grads[i].numel() == numel,
               "AdamW (bf16 moments): parameter ", i, " or its gradient is not float32 contiguous of ", numel,
               " elements");
    FP8T_CHECK(b.exp_avgs[i].scalar_type() == at::kBFloat16 && b.exp_avg_sqs[i].scalar_type() == at::kBFloat16 &&
                   b.exp_avgs[i].is_contiguous() && b.exp_avg_sqs[i].is_contiguous() &&
                   b.exp_avgs[i].numel() == numel && b.exp_avg_sqs[i].numel() == numel,
               "AdamW (bf16 moments): the moments of parameter ", i, " are not bfloat16 contiguous of ", numel,
               " elements");
    FP8T_CHECK(b.states[i].scalar_type() == at::kFloat && b.states[i].numel() == adamw::kStateSize &&
                   b.states[i].is_contiguous(),
               "AdamW (bf16 moments): the state of parameter ", i, " is not float32 [3]");
  }
}

// The CPU loop: the kernel's arithmetic element by element (parallel over elements, each
// element's result independent of the split).
void step_cpu(const Bf16MomentsBatch& b, const Bf16MomentsStep& a) {
  if (a.found_inf.defined() && host_value(a.found_inf) == 1.0f) return;  // adamw::skip_step
  const adamw::Constants c = adamw::make_constants(a.beta1, a.beta2, a.eps, a.weight_decay);
  const float lr = a.lr.defined() ? host_value(a.lr) : a.lr_value;
  const bool has_scale = a.grad_scale.defined();
  const float scale = has_scale ? host_value(a.grad_scale) : 1.0f;
  for (size_t i = 0; i < b.params.size(); ++i) {
    float* state = b.states[i].data_ptr<float>();
    adamw::advance_state(state, c);
    const adamw::StepScalars s = adamw::step_scalars(state, lr, c.weight_decay);
    float* p = b.params[i].data_ptr<float>();
    const float* g = b.grads[i].data_ptr<float>();
    auto* m = reinterpret_cast<uint16_t*>(b.exp_avgs[i].data_ptr<at::BFloat16>());
    auto* v = reinterpret_cast<uint16_t*>(b.exp_avg_sqs[i].data_ptr<at::BFloat16>());
    at::parallel_for(0, b.params[i].numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        adamw::update_element(p[e], adamw::scaled_grad(g[e], has_scale, scale), m[e], v[e], c, s);
      }
    });
  }
}

}  // namespace

void adamw_bf16_moments_step(const Bf16MomentsBatch& batch, const Bf16MomentsStep& step) {
  check_batch(batch);
  if (batch.params.empty()) return;
  if (batch.params.front().is_cuda()) {
#if defined(FP8T_WITH_CUDA)
    adamw_bf16_moments_step_cuda(batch, step);
    return;
#else
    FP8T_CHECK(false, "AdamW (bf16 moments): a CUDA tensor in a build without CUDA");
#endif
  }
  FP8T_CHECK(batch.params.front().is_cpu(), "AdamW (bf16 moments): parameters on ", batch.params.front().device(),
             " are not supported (CPU or CUDA)");
  step_cpu(batch, step);
}

}  // namespace fp8t::train
