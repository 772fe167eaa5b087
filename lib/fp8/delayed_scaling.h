// The ONE delayed-scaling state machine of fp8train (TransformerEngine semantics,
// fp8-reference.md section 2).
//
// Every FP8 tensor of the model has a slot: an amax history column, a scale and a scale_inv.
// State lives in three tensors on the model's device so the GPU path never reads it on the host:
//   amax_history [L, S]  row 0 is the current step's amax, filled by the casts (max-accumulated
//                        over every cast of the slot in the step: all micro-batches);
//   scale        [S]     the factor the casts multiply by: q = fp8(x * scale);
//   scale_inv    [S]     1 / scale.
//
// Timeline of one optimizer step t (the trainer calls update() once, after the backward of the
// last micro-batch and before the optimizer step):
//   - every forward cast (input, weight) and backward cast (grad_output) of step t uses the
//     scale computed at update t-1 (scale 1 before the first update), and records its amax into
//     row 0;
//   - update(): (multi-GPU: all-reduce row 0 with MAX first) then for each slot:
//     amax = max over the history (or row 0 for most_recent), taken before the roll; on every
//     `interval`-th update the scale is recomputed as fp8_max / amax / 2^margin (old scale kept
//     when amax is 0 or not finite, FLT_MAX when the result overflows); then the history rolls
//     by one and row 0 is zeroed. The history rolls on every update, whatever the interval.
// TE updates forward slots when the autocast region exits and backward slots after the first
// module's backward; with one forward and backward per step that is the same sequence of scales.
// Doing both at one point per optimizer step also makes gradient accumulation exact: the amax of
// a step is the max over all its micro-batches, as the reference specifies.
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

  // One update of every slot (see the timeline above). Runs the amax reducer first if set.
  void update();
  int64_t update_count() const { return update_count_; }

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
    float amax;           // amax of the last completed step
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
  at::Tensor last_amax_;     // [S] row 0 as of the last update (the history may be length 1)
  at::Tensor scratch_amax_;  // [S] sink for casts that must not record
  at::Tensor stats_sum_;     // [S, 3] saturated, underflow, count
  int64_t update_count_ = 0;
  bool collect_stats_ = false;
  std::function<void(at::Tensor&)> reducer_;
};

}  // namespace fp8
}  // namespace fp8t
