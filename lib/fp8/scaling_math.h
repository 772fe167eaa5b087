// The per-slot arithmetic of delayed scaling (TransformerEngine semantics,
// fp8-reference.md section 2), written once for host and device.
//
// DelayedScaling (lib/fp8/delayed_scaling.h) owns the state and decides WHEN to update;
// this header only says HOW one slot is updated. The CPU loop and the CUDA kernel
// (kernels/delayed_scaling.cu) both call update_slot(), so the formula exists once.
#pragma once

#include <cfloat>  // FLT_MAX

#include "lib/fp8/format.h"  // FP8T_HOST_DEVICE

namespace fp8t {
namespace fp8 {

// NaN-propagating max: a NaN amax must survive so that the update keeps the old scale.
FP8T_HOST_DEVICE float amax_combine(float a, float b) { return (b != b || b > a) ? b : a; }

FP8T_HOST_DEVICE bool is_finite(float x) { return x == x && x - x == 0.0f; }

// scale_new = (fp8_max / amax) / 2^margin; keep the old scale when amax is 0 or not finite;
// an infinite result (tiny amax) becomes FLT_MAX.
FP8T_HOST_DEVICE float compute_scale(float amax, float old_scale, float fp8_max, float two_pow_margin) {
  if (!(amax > 0.0f) || !is_finite(amax)) return old_scale;
  float s = (fp8_max / amax) / two_pow_margin;
  if (!is_finite(s)) s = FLT_MAX;
  return s;
}

// One update of one slot. history points at h[0] of the slot, consecutive entries are
// `stride` floats apart (state is [history_len, n_slots] row-major, so stride = n_slots).
//   1. amax = max(h[0..L-1]) (use_max) or h[0] (most_recent), taken before the roll;
//   2. if recompute: scale = compute_scale(...), scale_inv = 1 / scale;
//   3. roll by -1 and zero h[0] (exactly torch.roll(h, -1, 0); h[0] = 0 as TE does).
FP8T_HOST_DEVICE void update_slot(float* history, int history_len, int stride, float* scale,
                                  float* scale_inv, float fp8_max, float two_pow_margin,
                                  bool use_max, bool recompute) {
  float amax = history[0];
  if (use_max) {
    for (int i = 1; i < history_len; ++i) amax = amax_combine(amax, history[i * stride]);
  }
  if (recompute) {
    const float s = compute_scale(amax, *scale, fp8_max, two_pow_margin);
    *scale = s;
    *scale_inv = 1.0f / s;
  }
  const float first = history[0];
  for (int i = 0; i + 1 < history_len; ++i) history[i * stride] = history[(i + 1) * stride];
  history[(history_len - 1) * stride] = first;
  history[0] = 0.0f;
}

}  // namespace fp8
}  // namespace fp8t
