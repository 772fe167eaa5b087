// The ONE delayed-scaling state machine of fp8train (TransformerEngine semantics; docs/fp8.md
// lists the differences from TE).
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

#include "lib/fp8/backend.h"  // SlotRef
#include "lib/fp8/recipe.h"   // Recipe

namespace fp8t {
namespace fp8 {

class DelayedScaling {
 public:
  explicit DelayedScaling(const Recipe& recipe);

  // Registration (before finalize): returns the slot index. name: "h0.attn.c_attn:input".
  int add_slot(const std::string& name, Format format);
  // Allocate the state tensors on `device` (scale 1, history zeros).
  void finalize(const at::Device& device);
  bool finalized() const { return history_.defined(); }

  // Views for the casts. record=false gives an amax sink that the state never reads (used in
  // evaluation, so that validation does not change the recipe state).
  SlotRef slot(int index, bool record = true) const;

  // One update of every slot (see above). Runs the amax reducer first if set.
  // skip (optional 0-d float32 or bool on the device, non-zero = skip; the optimizer's found_inf,
  // lib/train/step_health.h): a skipped step leaves history, scales and last amax as they were
  // and drops its row 0 (the amaxes of a step with inf/NaN gradients), decided on the device.
  // The update count still advances (it lives on the host).
  void update(const at::Tensor& skip = at::Tensor());
  int64_t update_count() const { return update_count_; }

  // Called after the backward of every micro-batch; updates as fp8.amax_update says. `skip`
  // is passed to the step's update in `step` mode; `microbatch` mode updates after every
  // micro-batch as TE does, before the step's skip decision exists, and ignores it.
  void end_micro_batch(bool last_of_step, const at::Tensor& skip = at::Tensor());
  // Changes whenever a weight must be cast (and recorded) again with the current scale: every
  // update in `step` mode; every optimizer step in `microbatch` mode, where TE reuses the FP8
  // weight of the first micro-batch for the others.
  int64_t weight_epoch() const;

  // Multi-process: called with amax_history row 0 ([S], on device) before each update; must
  // replace it in place by the MAX over all ranks (one collective).
  void set_amax_reducer(std::function<void(at::Tensor&)> reducer) { reducer_ = std::move(reducer); }

  // FP8 health statistics: while enabled, casts also accumulate per-slot saturation and
  // underflow fractions (summed; divided by the count on read).
  void set_collect_stats(bool on) { collect_stats_ = on; }
  bool collect_stats() const { return collect_stats_; }
  void add_stats(int index, const at::Tensor& fractions);  // fractions: float32 [2]
  struct SlotStats {
    std::string name;
    std::string format;
    float amax;           // amax of the last completed step (max over its updates)
    float scale;
    float saturated;      // fraction of elements at or beyond fp8_max after scaling
    float underflow;      // fraction of non-zero elements that became zero
  };
  // Reads the state on the host (log steps only) and resets the accumulated fractions.
  std::vector<SlotStats> read_stats();

  const Recipe& recipe() const { return recipe_; }
  int num_slots() const { return static_cast<int>(names_.size()); }
  const std::string& slot_name(int i) const { return names_[i]; }
  Format slot_format(int i) const { return formats_[i]; }
  const at::Tensor& amax_history() const { return history_; }
  const at::Tensor& scale() const { return scale_; }
  const at::Tensor& scale_inv() const { return scale_inv_; }

  // Checkpointing: tensors by name ("fp8.amax_history", ...) and the update count.
  std::map<std::string, at::Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, at::Tensor>& state);

 private:
  Recipe recipe_;
  std::vector<std::string> names_;
  std::vector<Format> formats_;
  at::Tensor history_, scale_, scale_inv_, fp8_max_;
  at::Tensor last_amax_;     // [S] max of row 0 over the last step's updates (for the stats)
  at::Tensor scratch_amax_;  // [S] sink for casts that must not record
  at::Tensor stats_sum_;     // [S, 3] saturated, underflow, count
  int64_t update_count_ = 0;
  int64_t steps_ended_ = 0;         // end_micro_batch(true) calls
  bool step_amax_started_ = false;  // microbatch mode: last_amax_ holds this step's earlier updates
  bool collect_stats_ = false;
  std::function<void(at::Tensor&)> reducer_;
};

}  // namespace fp8
}  // namespace fp8t
