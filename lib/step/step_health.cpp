#include "lib/step/step_health.h"

#include <ATen/ATen.h>            // at::where, at::stack, at::isfinite
#include <ATen/core/grad_mode.h>  // at::NoGradGuard

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::step {

StepHealth::StepHealth(const c10::Device& device, int64_t max_consecutive) : max_consecutive_(max_consecutive) {
  FP8T_CHECK(max_consecutive >= 1, "StepHealth: max_consecutive must be >= 1, got ", max_consecutive);
  found_inf_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  counters_ = at::zeros({4}, at::TensorOptions().dtype(at::kLong).device(device));
}

void StepHealth::begin_step() { found_inf_.zero_(); }

void StepHealth::flag_non_finite(const at::Tensor& value) {
  at::NoGradGuard no_grad;
  // all() of isfinite is false for any inf or NaN; the result stays on the device.
  const at::Tensor bad = at::logical_not(at::isfinite(value.detach()).all());
  found_inf_.copy_(at::maximum(found_inf_, bad.to(found_inf_.device(), at::kFloat)));
}

void StepHealth::flag(const at::Tensor& found) {
  at::NoGradGuard no_grad;
  const at::Tensor any = (found.detach() != 0).any();
  found_inf_.copy_(at::maximum(found_inf_, any.to(found_inf_.device(), at::kFloat)));
}

at::Tensor StepHealth::unless_skipped(const at::Tensor& value) const {
  // where, not a product: NaN * 0 is NaN.
  return at::where(found_inf_.to(value.device()) > 0, at::zeros_like(value), value);
}

void StepHealth::end_step(int64_t step) {
  at::NoGradGuard no_grad;
  const at::Tensor skipped = found_inf_.to(at::kLong);
  const at::Tensor consecutive = (counters_[1] + 1) * skipped;
  const at::Tensor streak_start = at::where(consecutive == 1, at::full_like(counters_[2], step), counters_[2]);
  const at::Tensor first_divergence = (consecutive >= max_consecutive_).logical_and(counters_[3] == 0);
  const at::Tensor diverged_at = at::where(first_divergence, streak_start, counters_[3]);
  counters_.copy_(at::stack({counters_[0] + skipped, consecutive, streak_start, diverged_at}));
}

StepHealth::Counts StepHealth::read() const {
  const at::Tensor host = counters_.cpu();
  const int64_t* c = host.data_ptr<int64_t>();
  return Counts{c[0], c[1], c[2], c[3]};
}

void StepHealth::restore_skipped(int64_t skipped) {
  counters_.zero_();
  counters_[0].fill_(skipped);
}

}  // namespace fp8t::step
