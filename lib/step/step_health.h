// Non-finite optimizer steps, detected and counted on the device.
//
// One 0-d float32 flag per optimizer step, `found_inf` (1.0: skip this step, 0.0: apply it; the
// convention of LibTorch's fused AdamW and of loss scalers), that several producers may set:
// the trainer flags a non-finite loss or global gradient norm, a dynamic loss scaler flags
// inf/NaN gradients after unscaling. Consumers read the flag on the device: AdamW skips the
// update (weights, moments and step count unchanged) and the FP8 delayed scaling drops the
// step's amaxes. Nothing here reads the device on the host except read(), which the trainer
// calls at log steps and before writing a checkpoint.
//
// Counters (int64, on the device) kept by end_step():
//   skipped      total skipped steps of the run;
//   consecutive  skipped steps in a row up to the last step (0 after an applied step);
//   streak_start the 1-based step where the current (or last) run of skips began;
//   diverged_at  the streak_start of the first run of skips that reached max_consecutive
//                (0: none), i.e. "the run diverged at step N".
#pragma once

#include <cstdint>  // int64_t

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device

namespace fp8t::step {

class StepHealth {
 public:
  // max_consecutive (train.max_skipped_steps, >= 1): skips in a row that count as divergence.
  StepHealth(const c10::Device& device, int64_t max_consecutive);

  // Clears the flag; called at the start of every optimizer step.
  void begin_step();
  // Producers. Sets the flag when `value` (any shape, floating point) holds an inf or NaN.
  void flag_non_finite(const at::Tensor& value);
  // Sets the flag when `found` (any shape) holds a non-zero element, e.g. a loss scaler's
  // found-inf tensor. Both are device ops only (no host sync) and OR into the flag.
  void flag(const at::Tensor& found);

  // The step's flag: 0-d float32 on the device, 1.0 = skip. Valid until the next begin_step().
  const at::Tensor& found_inf() const { return found_inf_; }
  // `value` where the step is applied, 0 where it is skipped (e.g. to keep a skipped step's NaN
  // loss out of a running sum).
  at::Tensor unless_skipped(const at::Tensor& value) const;

  // Updates the counters after the step `step` (1-based) on the device.
  void end_step(int64_t step);

  struct Counts {
    int64_t skipped = 0;
    int64_t consecutive = 0;
    int64_t streak_start = 0;
    int64_t diverged_at = 0;  // 0: not diverged
  };
  // One device-to-host copy of the counters.
  Counts read() const;
  // Restores the total after a resume (the other counters start at 0: a checkpoint is only
  // written after an applied step).
  void restore_skipped(int64_t skipped);
  int64_t max_consecutive() const { return max_consecutive_; }

 private:
  int64_t max_consecutive_;
  at::Tensor found_inf_;  // 0-d float32
  at::Tensor counters_;   // int64 [4]: skipped, consecutive, streak_start, diverged_at
};

}  // namespace fp8t::step
