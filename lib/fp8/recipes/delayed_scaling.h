// The delayed-scaling recipe's state class (TransformerEngine semantics; docs/fp8.md lists the
// differences from TE): one implementation of the scaling interface, lib/fp8/recipes/scaling.h.
//
// Every FP8 tensor of the model has a slot: an amax history column, a scale and a scale_inv.
// State lives in three tensors on the model's device so the GPU path never reads it on the host:
//   amax_history [L, S]  row 0 is the current amax, filled by the casts (max-accumulated over
//                        every cast of the slot since the last update; NaN elements ignored);
//   scale        [S]     the factor the casts multiply by: q = fp8(x * scale);
//   scale_inv    [S]     1 / scale.
//
// When (the trainer calls end_micro_batch() after each micro-batch's backward):
//   - fp8.amax_update = step (default): one update per optimizer step, after the last
//     micro-batch, so the amax of a step is the max over its micro-batches and the history
//     counts steps;
//   - fp8.amax_update = microbatch: one update after every micro-batch, as TE does (its forward
//     slots update when the autocast region exits, its backward slots after the backward; with
//     no cast in between, updating both after the backward gives the same scales). Micro-batch
//     k+1 casts with the scales of update k; the weight, cast once per optimizer step, records
//     nothing in micro-batches 2..M, so its slot skips those updates.
// Every cast uses the scale of the previous update (1 before the first one).
//
// What (scaling_math.h update_slot, per slot): multi-GPU: all-reduce row 0 with MAX first;
// a slot whose row 0 is 0 is skipped (no roll, no new scale); else the history rolls by one
// (row 0 zeroed) and, on every `interval`-th update, scale = (fp8_max * 2^-margin) / amax with
// amax = max over the window (or the current amax for most_recent), the old scale kept when
// amax is 0 or not finite, FLT_MAX when the result overflows.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <functional>  // std::function
#include <map>         // std::map
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/fp8/recipes/scaling.h"  // Scaling, SlotRef

namespace fp8t {
namespace fp8 {

class DelayedScaling final : public Scaling {
 public:
  explicit DelayedScaling(const Recipe& recipe);
  RecipeKind kind() const override { return RecipeKind::kDelayed; }

  // Views for the casts. record=false (or under NoRecordScope) gives an amax sink that the state
  // never reads (evaluation and recomputed forwards do not change the recipe state).
  SlotRef slot(int index, bool record = true) const;

  // One cast: the backend's fused cast with the slot's scale, recording the amax into row 0.
  Fp8Tensor quantize(int slot, const CastSource& src, const CastOptions& opt) override;
  // The scale is known before the cast: a producer may cast in its own kernel.
  std::optional<SlotRef> fused_cast_slot(int slot, bool record) const override { return this->slot(slot, record); }
  // The slot's scale itself (a view): update() is the only writer, after the backward.
  at::Tensor recast_scale(int slot) const override { return this->slot(slot).scale; }

  // One update of every slot (see above). Runs the amax reducer first if set.
  // skip (optional 0-d float32 or bool on the device, non-zero = skip; the optimizer's found_inf,
  // lib/step/step_health.h): a skipped step leaves history, scales and last amax as they were
  // and drops its row 0 (the amaxes of a step with inf/NaN gradients), decided on the device.
  // The update count still advances (it lives on the host).
  void update(const at::Tensor& skip = at::Tensor()) override;
  int64_t update_count() const { return update_count_; }

  // Called after the backward of every micro-batch; updates as fp8.amax_update says. `skip`
  // is passed to the step's update in `step` mode; `microbatch` mode updates after every
  // micro-batch as TE does, before the step's skip decision exists, and ignores it.
  void end_micro_batch(bool last_of_step, const at::Tensor& skip = at::Tensor()) override;
  // Changes whenever a weight must be cast (and recorded) again with the current scale: every
  // update in `step` mode; every optimizer step in `microbatch` mode, where TE reuses the FP8
  // weight of the first micro-batch for the others.
  int64_t weight_epoch() const override;

  // Multi-process: called with amax_history row 0 ([S], on device) before each update; must
  // replace it in place by the MAX over all ranks (one collective).
  void set_amax_reducer(std::function<void(at::Tensor&)> reducer) override { reducer_ = std::move(reducer); }

  // Reads the state on the host (log steps only) and resets the accumulated fractions.
  std::vector<SlotStats> read_stats() override;

  const at::Tensor& amax_history() const override { return history_; }
  const at::Tensor& scale() const override { return scale_; }
  const at::Tensor& scale_inv() const override { return scale_inv_; }

  // Checkpointing: tensors by name ("fp8.amax_history", ...) and the update count.
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;

 protected:
  void allocate(const at::Device& device) override;

 private:
  at::Tensor history_, scale_, scale_inv_, fp8_max_;
  at::Tensor last_amax_;     // [S] max of row 0 over the last step's updates (for the stats)
  at::Tensor scratch_amax_;  // [S] sink for casts that must not record
  int64_t update_count_ = 0;
  int64_t steps_ended_ = 0;         // end_micro_batch(true) calls
  bool step_amax_started_ = false;  // microbatch mode: last_amax_ holds this step's earlier updates
  std::function<void(at::Tensor&)> reducer_;
};

}  // namespace fp8
}  // namespace fp8t
