#include "lib/fp8/recipes/delayed_scaling.h"

#include <cmath>  // std::ldexp

#include "lib/numerics/scaling_math.h"  // kMaxMargin
#include "lib/util/error.h"             // FP8T_CHECK

namespace fp8t {
namespace fp8 {

DelayedScaling::DelayedScaling(const Recipe& recipe) : Scaling(recipe) {
  FP8T_CHECK(recipe.amax_history_len >= 1, "fp8.amax_history_len must be >= 1");
  FP8T_CHECK(recipe.interval >= 1, "fp8.interval must be >= 1");
  FP8T_CHECK(recipe.margin >= -kMaxMargin && recipe.margin <= kMaxMargin, "fp8.margin must be in [-", kMaxMargin,
             ", ", kMaxMargin, "]");
}

void DelayedScaling::allocate(const at::Device& device) {
  const int64_t S = num_slots();
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  history_ = at::zeros({recipe_.amax_history_len, S}, opts);
  scale_ = at::ones({S}, opts);
  scale_inv_ = at::ones({S}, opts);
  fp8_max_ = fp8_max_tensor();
  last_amax_ = at::zeros({S}, opts);
  scratch_amax_ = at::zeros({S}, opts);
}

SlotRef DelayedScaling::slot(int index, bool record) const {
  FP8T_CHECK(finalized(), "DelayedScaling used before finalize()");
  FP8T_CHECK(index >= 0 && index < num_slots(), "bad FP8 slot index ", index);
  SlotRef ref;
  ref.scale = scale_[index];
  ref.amax = recording(record) ? history_[0][index] : scratch_amax_[index];
  ref.format = slot_format(index);
  ref.index = index;
  return ref;
}

Fp8Tensor DelayedScaling::quantize(int index, const CastSource& src, const CastOptions& opt) {
  SlotRef ref = slot(index, opt.record);
  if (opt.scale.defined()) {  // a recast (recast_scale): the amax goes to the scratch slot
    FP8T_CHECK(!recording(opt.record), "fp8: a cast with a given scale records nothing (slot ", slot_name(index), ")");
    ref.scale = opt.scale;
  }
  Backend& backend = backend_for(src.x.device());
  Fp8Tensor out = backend.quantize(src, ref, {opt.rowwise, opt.columnwise, opt.dbias, value_companion(opt)});
  if (recording(opt.record) && collect_stats()) add_stats(index, backend.saturation_stats(materialize(src), ref));
  return out;
}

void DelayedScaling::update(const at::Tensor& skip) {
  FP8T_CHECK(finalized(), "DelayedScaling used before finalize()");
  if (num_slots() == 0) return;
  at::Tensor row0 = history_[0];
  if (reducer_) reducer_(row0);
  at::Tensor kept_history, kept_scale, kept_scale_inv, kept_last_amax;  // what a skipped step restores
  if (skip.defined()) {
    kept_history = history_.clone();
    kept_history[0].zero_();
    kept_scale = scale_.clone();
    kept_scale_inv = scale_inv_.clone();
    kept_last_amax = last_amax_.clone();
  }
  if (step_amax_started_) {
    at::fmax_out(last_amax_, last_amax_, row0);
  } else {
    last_amax_.copy_(row0);
  }
  step_amax_started_ = recipe_.amax_update == AmaxUpdate::kMicrobatch;
  ++update_count_;
  const bool recompute = update_count_ % recipe_.interval == 0;
  const float two_pow_margin = std::ldexp(1.0f, recipe_.margin);
  backend_for(history_.device())
      .update_scaling(history_, scale_, scale_inv_, fp8_max_, two_pow_margin,
                      recipe_.amax_compute_algo == AmaxComputeAlgo::kMax, recompute);
  if (skip.defined()) {
    const at::Tensor skipped = skip.to(history_.device()) != 0;
    history_.copy_(at::where(skipped, kept_history, history_));
    scale_.copy_(at::where(skipped, kept_scale, scale_));
    scale_inv_.copy_(at::where(skipped, kept_scale_inv, scale_inv_));
    last_amax_.copy_(at::where(skipped, kept_last_amax, last_amax_));
  }
}

void DelayedScaling::end_micro_batch(bool last_of_step, const at::Tensor& skip) {
  if (recipe_.amax_update == AmaxUpdate::kMicrobatch) {
    update();
  } else if (last_of_step) {
    update(skip);
  }
  if (last_of_step) {
    ++steps_ended_;
    step_amax_started_ = false;
  }
}

int64_t DelayedScaling::weight_epoch() const {
  return recipe_.amax_update == AmaxUpdate::kMicrobatch ? steps_ended_ : update_count_;
}

std::vector<SlotStats> DelayedScaling::read_stats() { return per_tensor_stats(last_amax_, scale_); }

std::map<std::string, at::Tensor> DelayedScaling::state_dict() const {
  return {{"fp8.amax_history", history_},
          {"fp8.scale", scale_},
          {"fp8.scale_inv", scale_inv_},
          {"fp8.last_amax", last_amax_},
          {"fp8.update_count", at::tensor({update_count_}, at::kLong)}};
}

void DelayedScaling::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  FP8T_CHECK(finalized(), "DelayedScaling used before finalize()");
  auto get = [&](const std::string& key) -> const at::Tensor& {
    const auto it = state.find(key);
    FP8T_INPUT_CHECK(it != state.end(), "checkpoint has no FP8 state '", key,
                     "' (was it written by a run with precision fp8?)");
    return it->second;
  };
  const at::Tensor& h = get("fp8.amax_history");
  FP8T_INPUT_CHECK(h.sizes() == history_.sizes(), "checkpoint FP8 history has shape ", h.sizes(),
                   " but this run needs ", history_.sizes(),
                   " (fp8.amax_history_len and the converted layers must match the checkpointed run)");
  history_.copy_(h);
  scale_.copy_(get("fp8.scale"));
  scale_inv_.copy_(get("fp8.scale_inv"));
  last_amax_.copy_(get("fp8.last_amax"));
  update_count_ = get("fp8.update_count").item<int64_t>();
}

}  // namespace fp8
}  // namespace fp8t
