// AdamW's per-element update, for either moments dtype (train.moments_dtype: fp32 or bf16),
// written once for the CPU loop (lib/optim/adamw_step.cpp) and the CUDA kernel
// (kernels/adamw.cu), so that both give the same bits (tests/optim/test_adamw_step_cuda.cpp
// compares them).
//
// Per element, all in FP32 (bf16 moments are widened exactly):
//   g  = g / grad_scale                                   (when clipping hands a divisor)
//   p  = p - (lr * wd) * p                                (decoupled weight decay; skipped for wd 0)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + ((1 - beta2) * g) * g
//   p  = p - (lr / (1 - beta1^t)) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
//   m, v stored as they are (fp32), or as bf16 rounded to nearest even (NaN stays NaN); the
//   update of p reads the FP32 m and v before that rounding (as Megatron's precision-aware
//   optimizer does).
// Every step is one IEEE operation in a fixed order: products that feed a sum are fmaf (one
// rounding), the others go through the *_rn operations of ieee_ops.h, which CUDA never contracts
// into an FMA; sqrt and division are IEEE-exact on both sides.
//
// Bias corrections without powf (libm's and CUDA's pow differ in the last bit): each parameter
// keeps a float32 state {t, beta1^t, beta2^t}, advanced by one IEEE multiply per step on the
// device (or the CPU), so it can be captured in a CUDA graph and needs no host read. A resumed
// run rebuilds it from t with the same multiplies (state_from_step).
#pragma once

#include <math.h>    // fmaf
#include <stdint.h>  // uint16_t, uint32_t

#include "lib/numerics/format.h"    // FP8T_HOST_DEVICE, fp8::detail::float_bits / bits_float
#include "lib/numerics/ieee_ops.h"  // mul_rn, add_rn, sub_rn, div_rn, sqrt_rn

namespace fp8t {
namespace train {
namespace adamw {

// ---- bf16 storage ----------------------------------------------------------------------------

// float -> bf16 bits, round to nearest even; a NaN stays a quiet NaN of the same sign (the rule
// of c10::BFloat16, so a tensor .to(kBFloat16) gives the same bits).
FP8T_HOST_DEVICE uint16_t bf16_bits(float x) {
  const uint32_t u = fp8::detail::float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// bf16 bits -> float: exact (the bf16 bits are the top half of the float).
FP8T_HOST_DEVICE float bf16_value(uint16_t b) { return fp8::detail::bits_float(static_cast<uint32_t>(b) << 16); }

// ---- single IEEE operations that nvcc never fuses into an FMA (ieee_ops.h) --------------------

using numerics::add_rn;
using numerics::div_rn;
using numerics::mul_rn;
using numerics::sqrt_rn;
using numerics::sub_rn;

// ---- the update ------------------------------------------------------------------------------

// The run's constants in float32, from the float32-rounded options (the caller rounds once).
struct Constants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
};

FP8T_HOST_DEVICE Constants make_constants(float beta1, float beta2, float eps, float weight_decay) {
  return Constants{beta1, beta2, sub_rn(1.0f, beta1), sub_rn(1.0f, beta2), eps, weight_decay};
}

// Per-parameter state: {t, beta1^t, beta2^t}; {0, 1, 1} before the first step.
constexpr int kStateSize = 3;

FP8T_HOST_DEVICE void init_state(float* state) {
  state[0] = 0.0f;
  state[1] = 1.0f;
  state[2] = 1.0f;
}

FP8T_HOST_DEVICE void advance_state(float* state, const Constants& c) {
  state[0] = add_rn(state[0], 1.0f);
  state[1] = mul_rn(state[1], c.beta1);
  state[2] = mul_rn(state[2], c.beta2);
}

// The state after `steps` steps from the start: what `steps` calls of advance_state give.
FP8T_HOST_DEVICE void state_from_step(float* state, float steps, const Constants& c) {
  init_state(state);
  while (state[0] < steps) advance_state(state, c);
}

// found_inf (lib/step/step_health.h) holding exactly 1 skips the whole step, as in LibTorch's
// fused AdamW.
FP8T_HOST_DEVICE bool skip_step(const float* found_inf) { return found_inf != nullptr && *found_inf == 1.0f; }

// What one step of one parameter shares across its elements (from the ADVANCED state).
struct StepScalars {
  float lr_wd;      // lr * weight_decay; 0 for the no-decay group
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
};

FP8T_HOST_DEVICE StepScalars step_scalars(const float* state, float lr, float weight_decay) {
  return StepScalars{mul_rn(lr, weight_decay), div_rn(lr, sub_rn(1.0f, state[1])), sqrt_rn(sub_rn(1.0f, state[2]))};
}

// Moment storage: float32 as it is, bf16 as its bits (widened exactly, stored rounded).
FP8T_HOST_DEVICE float moment_value(float m) { return m; }
FP8T_HOST_DEVICE float moment_value(uint16_t bits) { return bf16_value(bits); }
FP8T_HOST_DEVICE void store_moment(float& m, float value) { m = value; }
FP8T_HOST_DEVICE void store_moment(uint16_t& bits, float value) { bits = bf16_bits(value); }

// One element: p (float32) updated in place, g already divided by grad_scale, m and v (float, or
// uint16_t bf16 bits) read and written in place.
template <typename Moment>
FP8T_HOST_DEVICE void update_element(float& p, float g, Moment& m_store, Moment& v_store, const Constants& c,
                                     const StepScalars& s) {
  float w = p;
  if (s.lr_wd != 0.0f) w = fmaf(-s.lr_wd, w, w);
  const float m = fmaf(c.beta1, moment_value(m_store), mul_rn(c.one_minus_beta1, g));
  const float v = fmaf(c.beta2, moment_value(v_store), mul_rn(mul_rn(c.one_minus_beta2, g), g));
  const float denom = add_rn(div_rn(sqrt_rn(v), s.bc2_sqrt), c.eps);
  p = fmaf(-s.step_size, div_rn(m, denom), w);
  store_moment(m_store, m);
  store_moment(v_store, v);
}

// g / grad_scale as the kernel reads it (a null divisor: g unchanged).
FP8T_HOST_DEVICE float scaled_grad(float g, bool has_scale, float grad_scale) {
  return has_scale ? div_rn(g, grad_scale) : g;
}

}  // namespace adamw
}  // namespace train
}  // namespace fp8t
