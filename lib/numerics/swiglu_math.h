// The SwiGLU of a LLaMA MLP, y = silu(gate) * up, and its backward, written once for host and
// device. The fused FP8 casts (kernels/swiglu_cast.cu) evaluate these functions; the CPU
// emulation computes the unfused LibTorch composition (at::silu(gate) * up in the activation
// dtype, and autograd of that), and tests/numerics/test_swiglu_math.cpp proves the two bit-equal.
//
// Why this particular arithmetic: ATen's CPU silu kernels (aten/src/ATen/native/cpu/
// Activation.cpp) evaluate
//   silu(x)            = x / (1 + exp(-x))
//   silu_backward(d,x) = d * sig * (1 + x * (1 - sig)),  sig = 1 / (1 + exp(-x))
// in FP32 (bf16 inputs are widened and the result rounded back once), with exp from the
// vectorised math library (Vectorized<float>::exp = SLEEF's expf_u10 on AVX2, AVX-512 and NEON
// builds) and the add of the backward contracted into one fused multiply-add. vector_exp()
// below is that exp, operation for operation: Cody-Waite reduction by ln 2 in two parts, a
// degree-5 polynomial, the scaling by 2^q in two steps, and the same limits (x < -104 -> 0,
// x > 100 -> inf). Every a*b+c is an explicit fma, every other operation a single IEEE one, and
// products that feed an add are never contracted (mul_rn), so results are the same on both sides.
//
// Where ATen's CPU kernel leaves its vector loop (a row tail shorter than two vectors, or a
// build without AVX2/NEON) it calls std::exp instead, which differs from vector_exp by one ulp
// for a few percent of inputs; the activation dtype's rounding hides most of those (bf16 always
// hid them in the tests). CUDA's at::silu uses expf, not this exp; the fused GPU path therefore
// matches the CPU emulation, not ATen's CUDA kernel (docs/fp8.md, "SwiGLU").
//
// Plain C++ (no LibTorch): kernels/ include it.
#pragma once

#include <cmath>    // std::fmin, std::fmax, std::fabs (host; nvcc provides the device ones)
#include <cstdint>  // uint32_t

#include "lib/numerics/format.h"    // FP8T_HOST_DEVICE, detail::bits_float
#include "lib/numerics/ieee_ops.h"  // fma_rn, mul_rn, add_rn

namespace fp8t {
namespace fp8 {

namespace swiglu_detail {

// Single IEEE operations (ieee_ops.h): a product that feeds an add is mul_rn, never contracted.
using numerics::add_rn;
using numerics::fma_rn;
using numerics::mul_rn;

// t rounded to the nearest integer, ties to even (the vector unit's default conversion), as
// both the float and the int: adding 1.5 * 2^23 leaves the integer in the low mantissa bits
// (exact for |t| < 2^22), which is the same rounding as a conversion without the conversion
// instructions (a quarter-rate pipe on the GPU). The argument is clamped first: |x| > 177 ends in
// the limits of vector_exp anyway. A NaN argument clamps to either end; the exp of a NaN is NaN
// whatever q is (s below is NaN).
struct RoundedInt {
  float f;
  int i;
};
FP8T_HOST_DEVICE RoundedInt round_to_int(float t) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
#if defined(__CUDA_ARCH__)
  t = fminf(fmaxf(t, -256.0f), 256.0f);
#else
  t = std::fmin(std::fmax(t, -256.0f), 256.0f);
#endif
  const float r = add_rn(t, kMagic);
  RoundedInt q;
  q.i = static_cast<int>(detail::float_bits(r)) - static_cast<int>(detail::float_bits(kMagic));
  q.f = add_rn(r, -kMagic);
  return q;
}

// 2^q as a float for q in [-127, 128] (the exponent field q + 127; 128 gives inf).
FP8T_HOST_DEVICE float pow2i(int q) { return detail::bits_float(static_cast<uint32_t>(q + 127) << 23); }

}  // namespace swiglu_detail

// exp(x) as ATen's CPU vector kernels compute it (see the header comment): within 1 ulp of
// exp, and bit-identical to Vectorized<float>::exp.
FP8T_HOST_DEVICE float vector_exp(float x) {
  using namespace swiglu_detail;
  constexpr float kLog2e = 1.442695040888963407359924681001892137426645954152985934135449406931f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 in two parts: q * kLn2Hi is exact
  constexpr float kLn2Lo = 1.428606765330187045e-06f;
  const RoundedInt rq = round_to_int(x * kLog2e);
  const int q = rq.i;
  const float qf = rq.f;
  float s = fma_rn(qf, -kLn2Hi, x);
  s = fma_rn(qf, -kLn2Lo, s);
  float p = 0.000198527617612853646278381f;
  p = fma_rn(p, s, 0.00139304355252534151077271f);
  p = fma_rn(p, s, 0.00833336077630519866943359f);
  p = fma_rn(p, s, 0.0416664853692054748535156f);
  p = fma_rn(p, s, 0.166666671633720397949219f);
  p = fma_rn(p, s, 0.5f);
  float e = 1.0f + fma_rn(s * s, p, s);
  // 2^q in two factors, so that q down to -150 (subnormal results) and up to 128 stay in range.
  const int half = q >> 1;
  e = mul_rn(mul_rn(e, pow2i(half)), pow2i(q - half));
  // ATen's limits: x < -104 -> 0 (the scaling above would round some of those up to the
  // smallest subnormal) and x > 100 -> +inf, which the scaling already gives (q >= 144 overflows;
  // s, p and e stay +inf for x = +inf), so that limit costs no instruction.
  if (x < -104.0f) e = 0.0f;
  return e;
}

// silu(g) = g / (1 + exp(-g)), at::silu's FP32 expression.
FP8T_HOST_DEVICE float silu(float g) { return g / (1.0f + vector_exp(-g)); }

// The dtype an activation lives in, as a rounding of FP32 values: identity for fp32, round to
// nearest even bf16 for bf16 (the caller supplies it: kernels/fp8_device.cuh round_to_dtype on
// the GPU, c10::BFloat16 on the host).
struct IdentityRound {
  FP8T_HOST_DEVICE float operator()(float v) const { return v; }
};

// What the SwiGLU needs of the gate alone, from one exp: silu(gate) rounded to the dtype (the
// forward multiplies it by up; the backward's dup is dy times it) and the sigmoid in FP32 (the
// backward's dgate).
struct SiluOfGate {
  float silu;  // round(gate / (1 + exp(-gate)))
  float sig;   // 1 / (1 + exp(-gate))
};

template <typename Round>
FP8T_HOST_DEVICE SiluOfGate silu_of_gate(float gate, Round round) {
  const float e = vector_exp(-gate);
  SiluOfGate s;
  s.silu = round(gate / (1.0f + e));
  s.sig = 1.0f / (1.0f + e);
  return s;
}

// y = silu(gate) * up in the activation dtype: at::silu rounds its result to the dtype, then the
// product is rounded again (at::mul). swiglu_given takes the rounded silu(gate).
template <typename Round>
FP8T_HOST_DEVICE float swiglu_given(float silu_gate, float up, Round round) {
  return round(silu_gate * up);
}

template <typename Round>
FP8T_HOST_DEVICE float swiglu(float gate, float up, Round round) {
  return swiglu_given(round(silu(gate)), up, round);
}

struct SwigluGrad {
  float gate;  // dL/dgate
  float up;    // dL/dup
};

// The gradient autograd computes for y = at::silu(gate) * up, each step rounded to the dtype:
//   MulBackward:  dsilu = dy * up,  dup = dy * silu(gate)   (silu(gate) as the forward stored it)
//   SiluBackward: dgate = at::silu_backward(dsilu, gate)
// with exp(-gate) evaluated once for both (ATen evaluates it twice, identically).
// swiglu_backward_given takes silu_of_gate(gate, round).
template <typename Round>
FP8T_HOST_DEVICE SwigluGrad swiglu_backward_given(float dy, float gate, float up, SiluOfGate s, Round round) {
  const float dsilu = round(dy * up);
  SwigluGrad g;
  g.gate = round(dsilu * s.sig * swiglu_detail::fma_rn(gate, 1.0f - s.sig, 1.0f));
  g.up = round(dy * s.silu);
  return g;
}

template <typename Round>
FP8T_HOST_DEVICE SwigluGrad swiglu_backward(float dy, float gate, float up, Round round) {
  return swiglu_backward_given(dy, gate, up, silu_of_gate(gate, round), round);
}

// ---- silu_of_gate of a bf16 gate, from a table -----------------------------------------------
// A bf16 gate has 65536 values, so silu_of_gate is a function of 16 bits: the GPU kernels look it
// up instead of evaluating vector_exp and the IEEE divisions per element (those made the SwiGLU
// kernels bound by instructions, not bytes). The table holds the gates with the exponent field
// in [kSiluTableExpLo, kSiluTableExpHi], 2^-25 <= |gate| < 128, both signs (8192 entries); the
// others have closed forms, the same bits as the formula:
//   |gate| < 2^-25 (zeros and subnormals too): exp(-gate) rounds to 1, so silu = round(gate / 2)
//     (gate / 2 is exact: 0.5 * gate) and sig = 1 / 2;
//   |gate| >= 128, finite: exp(-gate) is 0 (below -104) for a positive gate: silu = gate, sig = 1;
//     +inf for a negative one: silu = gate / inf = -0, sig = 0;
//   inf and NaN: the formula itself.
// tests/numerics/test_swiglu_math.cpp compares every bf16 gate with the formula, bit for bit.
constexpr int kSiluTableExpLo = 102;                                            // |gate| >= 2^-25
constexpr int kSiluTableExpHi = 133;                                            // |gate| < 2^7
constexpr int kSiluTableHalf = (kSiluTableExpHi - kSiluTableExpLo + 1) * 128;  // entries per sign
constexpr int kSiluTableSize = 2 * kSiluTableHalf;                              // 8192

// The gate of table entry i in [0, kSiluTableSize): the sign is i / kSiluTableHalf, the bf16
// exponent and mantissa bits i % kSiluTableHalf past the first tabulated gate.
FP8T_HOST_DEVICE float silu_table_gate(int i) {
  const uint32_t u = static_cast<uint32_t>(i);
  const uint32_t sign = u / kSiluTableHalf;
  const uint32_t magnitude = u % kSiluTableHalf + kSiluTableExpLo * 128;
  return detail::bits_float(((sign << 15) | magnitude) << 16);
}

// silu_of_gate(gate, round) for a finite bf16 gate (a float whose low 16 bits are zero) and round
// the bf16 rounding, where table(i) returns silu_of_gate(silu_table_gate(i), round) (its sig may
// be left out where the caller uses only the silu). Written without branches: the table is read
// at a clamped index whatever the class and the class picks by selects, so that the GPU kernels
// issue the table reads of several elements together instead of one after another.
template <typename Table, typename Round>
FP8T_HOST_DEVICE SiluOfGate silu_of_finite_bf16_gate(float gate, const Table& table, Round round) {
  const uint32_t b = detail::float_bits(gate) >> 16;
  const int t = static_cast<int>(b & 0x7FFFu) - kSiluTableExpLo * 128;
  const bool negative = (b >> 15) != 0;
  const int clamped = t < 0 ? 0 : (t >= kSiluTableHalf ? kSiluTableHalf - 1 : t);
  const SiluOfGate tabulated = table(clamped + (negative ? kSiluTableHalf : 0));
  const float tiny_silu = round(0.5f * gate);  // |gate| < 2^-25
  const float large_silu = negative ? -0.0f : gate, large_sig = negative ? 0.0f : 1.0f;  // |gate| >= 128
  SiluOfGate s;
  s.silu = t < 0 ? tiny_silu : (t >= kSiluTableHalf ? large_silu : tabulated.silu);
  s.sig = t < 0 ? 0.5f : (t >= kSiluTableHalf ? large_sig : tabulated.sig);
  return s;
}

// Whether a float is finite (not inf, not NaN).
FP8T_HOST_DEVICE bool is_finite_bits(float v) { return (detail::float_bits(v) & 0x7F800000u) != 0x7F800000u; }

// silu_of_gate(gate, round) for any bf16 gate: the table (silu_of_finite_bf16_gate), or the
// formula itself for inf and NaN.
template <typename Table, typename Round>
FP8T_HOST_DEVICE SiluOfGate silu_of_bf16_gate(float gate, const Table& table, Round round) {
  return is_finite_bits(gate) ? silu_of_finite_bf16_gate(gate, table, round) : silu_of_gate(gate, round);
}

// ---- upper bounds of |value| for the amax pass --------------------------------------------------
// Current scaling's amax pass needs max |value| only, so a point whose cheap bound does not exceed
// the running max cannot change the result and need not be evaluated (kernels/amax.cu; the GELU
// passes do the same with their own bounds). For every dtype the kernels read (fp32, bf16), with
// M = max(|gate|, |up|, kSiluNegMax) for the backward and max(|gate|, kSiluNegMax) for the forward:
//   |silu(gate)| <= max(|gate|, kSiluNegMax): silu(g) = g sig(g) is in (0, g) for g > 0 and in
//     [-0.27846, 0) for g < 0 (its minimum, at g = -1.2785); rounded to bf16, -0.2793 at most;
//   |silu'(gate)| = |sig (1 + gate (1 - sig))| <= 1.0998 (at gate = 2.3994), and the FP32
//     evaluation of that product stays within 2^-17 of it;
// so |y| <= M |up|, |dup| <= M |dy| and |dgate| <= 1.0998 |round(dy up)|, each times the
// roundings to FP32 and to the dtype (at most (1 + 2^-8)^2 where they are normal). Subnormal
// intermediates add at most 2^-132 in absolute terms (a subnormal round(dy up) sig, rounded up
// by 2^-150, times |1 + gate (1 - sig)| <= 105, then the bf16 rounding's 2^-134). The bound is
// kSwigluBoundFactor times the product plus kSwigluBoundFloor, which covers both with room.
// NaN operands: a NaN gate or (backward) up is dropped from M, and every value it reaches is NaN
// (ignored by the amax); a NaN bound (a NaN dy, or forward up; a zero factor against an infinite
// gate or up) comes only with values that are NaN or 0, which cannot raise the max, and callers
// evaluate such a point anyway (bound_may_raise).
// tests/numerics/test_swiglu_math.cpp checks the bounds against the formulas for every bf16 gate.
constexpr float kSiluNegMax = 0.28f;         // > 0.2793, |silu| of a negative gate, rounded
constexpr float kSwigluBoundFactor = 1.25f;  // > 1.0998 (1 + 2^-8)^2 (1 + 2^-17)
constexpr float kSwigluBoundFloor = 0x1p-120f;  // > 2^-132

namespace swiglu_detail {

// max(|a|, |b|); a NaN operand is dropped (fmax).
FP8T_HOST_DEVICE float abs_max(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(fabsf(a), fabsf(b));
#else
  return std::fmax(std::fabs(a), std::fabs(b));
#endif
}

FP8T_HOST_DEVICE float abs_of(float a) {
#if defined(__CUDA_ARCH__)
  return fabsf(a);
#else
  return std::fabs(a);
#endif
}

// kSwigluBoundFactor |a| m + kSwigluBoundFloor (m >= 0).
FP8T_HOST_DEVICE float bound_of(float a, float m) {
  return add_rn(mul_rn(mul_rn(abs_of(a), m), kSwigluBoundFactor), kSwigluBoundFloor);
}

}  // namespace swiglu_detail

// A bound of |swiglu(gate, up)| (either dtype rounding; see above).
FP8T_HOST_DEVICE float swiglu_bound(float gate, float up) {
  using namespace swiglu_detail;
  return bound_of(up, abs_max(gate, kSiluNegMax));
}

// A bound of |dgate| and |dup| of swiglu_backward(dy, gate, up) (either dtype rounding; see above).
FP8T_HOST_DEVICE float swiglu_backward_bound(float dy, float gate, float up) {
  using namespace swiglu_detail;
  return bound_of(dy, abs_max(abs_max(gate, up), kSiluNegMax));
}

// Whether a point with this bound may raise the running max m (>= 0): NaN bounds do.
FP8T_HOST_DEVICE bool bound_may_raise(float bound, float m) { return !(bound <= m); }

}  // namespace fp8
}  // namespace fp8t
