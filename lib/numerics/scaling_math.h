// The per-slot arithmetic of delayed and current scaling, written once for host and device. It follows
// TransformerEngine's default (fused) update kernel, `kernel_bulk` in
// transformer_engine/common/recipe/delayed_scaling.cu (TE >= 1.7); docs/fp8.md lists where
// fp8train differs from TE and why.
//
// DelayedScaling (lib/fp8/recipes/delayed_scaling.h) owns the state and decides WHEN to update;
// this header only says HOW one slot is updated and how a cast combines |x| into an amax. The
// CPU loop, the CPU casts and the CUDA kernels (kernels/delayed_scaling.cu, and the amax of
// every cast kernel through kernels/fp8_device.cuh's abs_bits) follow these functions, and
// tests/kernels prove them bit-equal.
#pragma once

#include <cfloat>  // FLT_MAX

#include "lib/numerics/format.h"  // FP8T_HOST_DEVICE

namespace fp8t {
namespace fp8 {

// The largest |fp8.margin|. E4M3 (every forward tensor) spans 2^-9 .. 448, under 18 binades:
// a margin of 18 maps every amax below E4M3's smallest subnormal (all codes 0), and -18 leaves
// every value within 2^18 of the amax saturated. It also keeps scaled_max() exact.
constexpr int kMaxMargin = 17;

// fmaxf semantics: a NaN operand is ignored (the other one is returned). TE's casts compute their
// amax with fmaxf, so a NaN element never reaches the amax (inf does); its history max uses
// fmaxf too. (For -0 vs +0 fmaxf may return either; amaxes are absolute values, always +0.)
FP8T_HOST_DEVICE float amax_combine(float a, float b) { return (b > a || a != a) ? b : a; }

FP8T_HOST_DEVICE bool is_finite(float x) { return x == x && x - x == 0.0f; }

FP8T_HOST_DEVICE bool is_inf(float x) { return x == x && x - x != 0.0f; }

// The value the amax is mapped to: fp8_max * 2^-margin, computed before dividing by the amax as
// TE does (`scaled_max`). two_pow_margin = 2^margin is a power of two and fp8.margin is limited
// to [-17, 17], so this division is exact.
FP8T_HOST_DEVICE float scaled_max(float fp8_max, float two_pow_margin) { return fp8_max / two_pow_margin; }

// scale_new = scaled_max / amax (ONE rounding, so overflowing and subnormal results are TE's);
// keep the old scale when amax is 0 or not finite; an infinite result (tiny amax) becomes FLT_MAX.
FP8T_HOST_DEVICE float compute_scale(float amax, float old_scale, float fp8_max, float two_pow_margin) {
  float s = old_scale;
  if (is_finite(amax) && amax > 0.0f) s = scaled_max(fp8_max, two_pow_margin) / amax;
  if (is_inf(s)) s = FLT_MAX;
  return s;
}

// Current scaling (TE Float8CurrentScaling): the scale of a tensor from its own amax, taken in
// the same step, with delayed scaling's formula and margin (compute_scale, starting from 1):
//   amax > 0 and finite  -> (fp8_max * 2^-margin) / amax, FLT_MAX if that overflows;
//   amax == 0            -> 1 (all zeros or NaN: any scale gives the same codes);
//   amax == inf          -> NaN: the tensor holds +-inf, and with a finite scale the inf would
//                           saturate to a finite +-fp8_max code unnoticed; a NaN scale makes
//                           every code NaN, so the loss or the gradients turn non-finite and the
//                           trainer skips the step (train.max_skipped_steps) instead.
// (amax itself is never NaN: amax_combine drops NaN elements.)
FP8T_HOST_DEVICE float current_scale(float amax, float fp8_max, float two_pow_margin) {
  if (is_inf(amax)) return amax - amax;  // inf - inf = NaN, the same on host and device
  return compute_scale(amax, 1.0f, fp8_max, two_pow_margin);
}

// One update of one slot. history points at h[0] of the slot, consecutive entries are
// `stride` floats apart (state is [history_len, n_slots] row-major, so stride = n_slots).
//   0. a slot whose current amax h[0] is 0 (nothing recorded, or only zeros and NaNs) is left
//      alone: no roll, no scale change (TE's fused kernel, `if (last_amax != 0.0f)`);
//   1. roll by -1 and zero h[0] (torch.roll(h, -1, 0); h[0] = 0);
//   2. amax = fmaxf-max over the window (use_max; NaN entries ignored) or the current amax
//      (most_recent);
//   3. if recompute: scale = compute_scale(...), scale_inv = 1 / scale.
FP8T_HOST_DEVICE void update_slot(float* history, int history_len, int stride, float* scale,
                                  float* scale_inv, float fp8_max, float two_pow_margin,
                                  bool use_max, bool recompute) {
  const float current = history[0];
  if (current == 0.0f) return;
  float window_max = 0.0f;
  for (int i = 0; i < history_len; ++i) {
    const float a = i + 1 < history_len ? history[(i + 1) * stride] : current;
    window_max = amax_combine(window_max, a);
    history[i * stride] = i > 0 ? a : 0.0f;
  }
  if (recompute) {
    const float s = compute_scale(use_max ? window_max : current, *scale, fp8_max, two_pow_margin);
    *scale = s;
    *scale_inv = 1.0f / s;
  }
}

}  // namespace fp8
}  // namespace fp8t
