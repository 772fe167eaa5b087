#include "lib/fp8/recipes/current_scaling.h"

#include <cmath>  // std::ldexp

#include "lib/numerics/scaling_math.h"  // kMaxMargin
#include "lib/util/error.h"             // FP8T_CHECK

namespace fp8t {
namespace fp8 {

CurrentScaling::CurrentScaling(const Recipe& recipe)
    : Scaling(recipe), two_pow_margin_(std::ldexp(1.0f, recipe.margin)) {
  FP8T_CHECK(recipe.margin >= -kMaxMargin && recipe.margin <= kMaxMargin, "fp8.margin must be in [-", kMaxMargin,
             ", ", kMaxMargin, "]");
}

void CurrentScaling::allocate(const at::Device& device) {
  const int64_t S = num_slots();
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  amax_ = at::zeros({S}, opts);
  scale_ = at::ones({S}, opts);
  scale_inv_ = at::ones({S}, opts);
  amax_rows_ = amax_.view({1, S});
  scratch_amax_ = at::zeros({S}, opts);
  scratch_scale_ = at::ones({S}, opts);
  scratch_scale_inv_ = at::ones({S}, opts);
  workspace_ = at::zeros({S, 2}, opts.dtype(at::kInt));
  scratch_workspace_ = at::zeros({S, 2}, opts.dtype(at::kInt));
}

CurrentScaling::CastState CurrentScaling::cast_state(int slot, bool record) const {
  FP8T_CHECK(finalized(), "CurrentScaling used before finalize()");
  FP8T_CHECK(slot >= 0 && slot < num_slots(), "bad FP8 slot index ", slot);
  if (recording(record)) return {amax_[slot], scale_[slot], scale_inv_[slot], workspace_[slot]};
  return {scratch_amax_[slot], scratch_scale_[slot], scratch_scale_inv_[slot], scratch_workspace_[slot]};
}

// amax pass (or the producer's amax) and the scale on the device (one launch on the GPU), then the
// fused per-tensor cast. A recast with an earlier cast's scale (opt.scale) skips the amax pass.
Fp8Tensor CurrentScaling::quantize(int slot, const CastSource& src, const CastOptions& opt) {
  const CastState st = cast_state(slot, opt.record);
  Backend& backend = backend_for(src.x.device());
  CastSource cast_src = src;
  if (opt.scale.defined()) {
    FP8T_CHECK(!recording(opt.record), "fp8: a cast with a given scale records nothing (slot ", slot_name(slot), ")");
  } else {
    // With a value companion the cast below reads src itself (and writes the value's codes too).
    const at::Tensor value =
        backend.current_amax_scale(src, opt.known_amax, st.amax, st.scale, st.scale_inv, st.workspace,
                                   format_max(slot_format(slot)), two_pow_margin_, opt.value_columnwise == nullptr);
    if (value.defined()) cast_src = CastSource::tensor(value);  // the pass wrote the value: cast it
  }
  // The cast max-accumulates the same amax again into st.amax (no change): no separate sink needed.
  // (A recast's amax goes to the scratch state.)
  const SlotRef ref{opt.scale.defined() ? opt.scale : st.scale, st.amax, slot_format(slot), slot};
  // A gradient source always gives both layouts (Backend::quantize); its value, a plain tensor, too.
  const bool gradient = src.op == CastOp::kDgelu || src.op == CastOp::kDswiglu;
  Fp8Tensor out = backend.quantize(cast_src, ref, {opt.rowwise || gradient, opt.columnwise || gradient, opt.dbias,
                                                   value_companion(opt)});
  if (recording(opt.record) && collect_stats()) add_stats(slot, backend.saturation_stats(materialize(cast_src), ref));
  return out;
}

SlotRef CurrentScaling::slot_for_known_amax(int slot, const at::Tensor& known_amax, bool record) {
  const CastState st = cast_state(slot, record);
  // A known amax needs no pass over a source: the scale kernel alone, which also records it
  // (the source names only the device). Also the scale of a sharded weight's parts
  // (Scaling::sharded_weight_scale: the whole weight's amax, reduced over the ranks).
  const at::Tensor amax = known_amax.reshape({});
  backend_for(amax.device())
      .current_amax_scale(CastSource::tensor(amax), amax, st.amax, st.scale, st.scale_inv, st.workspace,
                          format_max(slot_format(slot)), two_pow_margin_, /*may_write_value=*/false);
  return SlotRef{st.scale, st.amax, slot_format(slot), slot};
}

// The scale the cast that just ran used: the slot's (recorded) or the scratch one (under
// NoRecordScope), copied before the slot's next cast overwrites it.
at::Tensor CurrentScaling::recast_scale(int slot) const { return cast_state(slot, true).scale.clone(); }

void CurrentScaling::end_micro_batch(bool last_of_step, const at::Tensor& /*skip*/) {
  if (last_of_step) ++steps_ended_;
}

}  // namespace fp8
}  // namespace fp8t
