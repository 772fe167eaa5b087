#include "lib/optim/adamw_step.h"

#include <ATen/ATen.h>             // at::Tensor, at::kCPU
#include <ATen/Parallel.h>         // at::parallel_for
#include <ATen/record_function.h>  // RECORD_FUNCTION

#include <cstdint>  // int64_t, uint16_t

#include "lib/numerics/adamw_math.h"  // train::adamw::update_element, advance_state, step_scalars
#include "lib/util/error.h"           // FP8T_CHECK

namespace fp8t::optim {
namespace {

// A 0-d float32 tensor's value on the host (CPU tensors: no sync).
float host_value(const at::Tensor& t) { return t.to(at::kCPU, at::kFloat).item<float>(); }

void check_batch(const AdamWBatch& b) {
  const size_t n = b.params.size();
  FP8T_CHECK(b.grads.size() == n && b.exp_avgs.size() == n && b.exp_avg_sqs.size() == n && b.states.size() == n,
             "AdamW: the tensor lists differ in length");
  if (n == 0) return;
  const at::ScalarType moments = b.exp_avgs.front().scalar_type();
  FP8T_CHECK(moments == at::kFloat || moments == at::kBFloat16, "AdamW: moments of dtype ", moments,
             " (float32 or bfloat16)");
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = b.params[i].numel();
    FP8T_CHECK(b.params[i].scalar_type() == at::kFloat && b.params[i].is_contiguous() &&
                   b.grads[i].scalar_type() == at::kFloat && b.grads[i].is_contiguous() && b.grads[i].numel() == numel,
               "AdamW: parameter ", i, " or its gradient is not float32 contiguous of ", numel,
               " elements");
    FP8T_CHECK(b.exp_avgs[i].scalar_type() == moments && b.exp_avg_sqs[i].scalar_type() == moments &&
                   b.exp_avgs[i].is_contiguous() && b.exp_avg_sqs[i].is_contiguous() &&
                   b.exp_avgs[i].numel() == numel && b.exp_avg_sqs[i].numel() == numel,
               "AdamW: the moments of parameter ", i, " are not ", moments, " contiguous of ", numel, " elements");
    FP8T_CHECK(b.states[i].scalar_type() == at::kFloat && b.states[i].numel() == train::adamw::kStateSize &&
                   b.states[i].is_contiguous(),
               "AdamW: the state of parameter ", i, " is not float32 [3]");
  }
}

// The moments of parameter i as Moment* (float, or uint16_t bf16 bits).
template <typename Moment>
Moment* moments_of(const at::Tensor& t) {
  if constexpr (sizeof(Moment) == 4) {
    return t.data_ptr<float>();
  } else {
    return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
  }
}

// The CPU loop: the kernel's arithmetic element by element (parallel over elements, each
// element's result independent of the split).
template <typename Moment>
void step_cpu(const AdamWBatch& b, const AdamWStepArgs& a) {
  if (a.found_inf.defined() && host_value(a.found_inf) == 1.0f) return;  // train::adamw::skip_step
  const train::adamw::Constants c = train::adamw::make_constants(a.beta1, a.beta2, a.eps, a.weight_decay);
  const float lr = a.lr.defined() ? host_value(a.lr) : a.lr_value;
  const bool has_scale = a.grad_scale.defined();
  const float scale = has_scale ? host_value(a.grad_scale) : 1.0f;
  for (size_t i = 0; i < b.params.size(); ++i) {
    float* state = b.states[i].data_ptr<float>();
    train::adamw::advance_state(state, c);
    const train::adamw::StepScalars s = train::adamw::step_scalars(state, lr, c.weight_decay);
    float* p = b.params[i].data_ptr<float>();
    const float* g = b.grads[i].data_ptr<float>();
    Moment* m = moments_of<Moment>(b.exp_avgs[i]);
    Moment* v = moments_of<Moment>(b.exp_avg_sqs[i]);
    at::parallel_for(0, b.params[i].numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        train::adamw::update_element(p[e], train::adamw::scaled_grad(g[e], has_scale, scale), m[e], v[e], c, s);
      }
    });
  }
}

}  // namespace

void adamw_multi_tensor_step(const AdamWBatch& batch, const AdamWStepArgs& step) {
  // Named in profiles (`fp8train bench --profile`) like an ATen operator.
  RECORD_FUNCTION("fp8t::adamw_step", std::vector<c10::IValue>());
  check_batch(batch);
  if (batch.params.empty()) return;
  if (batch.params.front().is_cuda()) {
#if defined(FP8T_WITH_CUDA)
    adamw_multi_tensor_step_cuda(batch, step);
    return;
#else
    FP8T_CHECK(false, "AdamW: a CUDA tensor in a build without CUDA");
#endif
  }
  FP8T_CHECK(batch.params.front().is_cpu(), "AdamW: parameters on ", batch.params.front().device(),
             " are not supported (CPU or CUDA)");
  if (batch.exp_avgs.front().scalar_type() == at::kBFloat16) {
    step_cpu<uint16_t>(batch, step);
  } else {
    step_cpu<float>(batch, step);
  }
}

}  // namespace fp8t::optim
