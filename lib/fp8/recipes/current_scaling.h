// The current-scaling recipe's state class (TransformerEngine's Float8CurrentScaling; torchao's
// "tensorwise" dynamic scaling): one implementation of the scaling interface, lib/fp8/recipes/scaling.h.
//
// Every cast computes its own per-tensor scale from the tensor it casts, in the same step:
//   amax  = max|value| (NaN elements ignored, inf counted: amax_combine), by an amax pass over the
//           value, or handed over by a producer that computed it in its own kernel (the norm);
//   scale = current_scale(amax) = (fp8_max * 2^-margin) / amax (scaling_math.h: 1 for amax 0,
//           FLT_MAX on overflow, NaN for an infinite amax so the step turns non-finite and is
//           skipped), computed on the device: both by Backend::current_amax_scale, on the GPU one
//           launch (the amax kernel's last CTA computes the scale);
//   codes = the backend's per-tensor cast with that scale (fused GELU / GELU-backward casts too).
//           Where the amax pass wrote the value on the way (CUDA: SwiGLU and its backward), the
//           cast reads that tensor instead: the same codes, without evaluating the value twice.
// Formats as fp8.fp8_format says (HYBRID: E5M2 gradients). No amax history, no update, no
// cross-rank reduction: weights are identical on every rank after the all-reduced optimizer step,
// so their scales agree; activation and gradient scales are each rank's own, like their data.
// Weights are cast once per optimizer step (Fp8Linear's weight cache, weight_epoch()).
//
// State ([S] float32 on the device, for statistics and tests): the amax, scale and scale_inv of
// each slot's last recorded cast, plus each slot's amax-kernel workspace (int32 [S, 2]: accumulator
// and CTA ticket, zero between casts). Casts that must not record (evaluation, NoRecordScope) work
// in scratch state with their own workspaces. A checkpoint needs none of it: a resumed run computes the same scales from the
// same tensors.
#pragma once

#include <map>     // std::map
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/recipes/scaling.h"  // Scaling

namespace fp8t {
namespace fp8 {

class CurrentScaling final : public Scaling {
 public:
  explicit CurrentScaling(const Recipe& recipe);
  RecipeKind kind() const override { return RecipeKind::kCurrent; }

  Fp8Tensor quantize(int slot, const CastSource& src, const CastOptions& opt) override;
  // A copy: the slot's next recorded cast overwrites its scale.
  at::Tensor recast_scale(int slot) const override;
  // A scale from an amax computed elsewhere: the norm's first pass (fp8_norm.cpp), a sharded
  // weight's reduced parts.
  bool scales_from_known_amax() const override { return true; }
  SlotRef slot_for_known_amax(int slot, const at::Tensor& known_amax, bool record) override;

  void end_micro_batch(bool last_of_step, const at::Tensor& skip = at::Tensor()) override;
  int64_t weight_epoch() const override { return steps_ended_; }

  std::vector<SlotStats> read_stats() override { return per_tensor_stats(amax_, scale_); }

  const at::Tensor& amax_history() const override { return amax_rows_; }
  const at::Tensor& scale() const override { return scale_; }
  const at::Tensor& scale_inv() const override { return scale_inv_; }

  // No tensors: nothing of this state is needed to resume bit-exactly.
  std::map<std::string, at::Tensor> state_dict() const override { return {}; }
  void load_state_dict(const std::map<std::string, at::Tensor>& /*state*/) override {}

 protected:
  void allocate(const at::Device& device) override;

 private:
  // Where one cast keeps its amax and scale: the slot's entries, or scratch for casts that must
  // not record.
  struct CastState {
    at::Tensor amax, scale, scale_inv, workspace;
  };
  CastState cast_state(int slot, bool record) const;

  float two_pow_margin_;
  at::Tensor amax_, scale_, scale_inv_;  // [S]: the last recorded cast of each slot
  at::Tensor amax_rows_;                 // amax_ viewed as [1, S] (amax_history())
  at::Tensor scratch_amax_, scratch_scale_, scratch_scale_inv_;  // [S]
  at::Tensor workspace_, scratch_workspace_;                     // int32 [S, 2]
  int64_t steps_ended_ = 0;
};

}  // namespace fp8
}  // namespace fp8t
