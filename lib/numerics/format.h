// FP8 formats: E4M3 ("fn" variant, no inf) and E5M2, encoded and decoded bit-exactly.
//
// Header-only, no LibTorch: the same functions run in the CPU emulation backend and in
// kernels/ (CUDA). Semantics follow CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt):
// round to nearest, ties to even; saturate to +-max finite (also for +-inf); every NaN
// becomes the positive NaN code 0x7F; a value that underflows keeps its sign (0x80 for -0).
// tests/numerics/test_format.cpp compares these with cuda_fp8.h bit for bit.
#pragma once

#include <cstdint>  // uint8_t, uint32_t
#include <cstring>  // std::memcpy (bit casts on the host)

#include "lib/numerics/host_device.h"  // FP8T_HOST_DEVICE

namespace fp8t {
namespace fp8 {

enum class Format : int { kE4M3 = 0, kE5M2 = 1 };

// Largest finite magnitude of each format (docs/fp8-formats.md).
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;

FP8T_HOST_DEVICE float format_max(Format f) { return f == Format::kE4M3 ? kE4M3Max : kE5M2Max; }

inline const char* format_name(Format f) { return f == Format::kE4M3 ? "E4M3" : "E5M2"; }

namespace detail {

FP8T_HOST_DEVICE uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

FP8T_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

// Generic IEEE-style encoder for a format with kMan mantissa bits and exponent bias kBias,
// whose largest finite code (without sign) is kMaxCode.
template <int kMan, int kBias, uint32_t kMaxCode>
FP8T_HOST_DEVICE uint8_t encode_generic(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;  // NaN -> canonical positive NaN (both formats)
  const int exp = static_cast<int>(a >> 23) - 127;  // unbiased float exponent
  constexpr int kShift = 23 - kMan;                  // float mantissa bits dropped
  uint32_t code;
  if (exp >= 1 - kBias) {
    // Normal range of the target: round the float mantissa to kMan bits, ties to even.
    // Rebias the exponent first; the carry of the rounding add moves into the exponent.
    const uint32_t rebased = a - (static_cast<uint32_t>(127 - kBias) << 23);
    const uint32_t lsb = (rebased >> kShift) & 1u;
    const uint32_t rounded = (rebased + ((1u << (kShift - 1)) - 1u) + lsb) >> kShift;
    code = rounded > kMaxCode ? kMaxCode : rounded;  // saturate (also inf)
  } else if ((a >> 23) == 0) {
    code = 0;  // float zero or float subnormal: far below the smallest fp8 subnormal
  } else {
    // Subnormal range of the target: value = q * 2^(1 - kBias - kMan).
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // with the implicit bit
    const int shift = 24 - kBias - kMan - exp;  // = (1-kBias-kMan) - (exp-23), >= 21 here
    if (shift > 24) {
      code = 0;
    } else {
      uint32_t q = mant >> shift;
      const uint32_t rem = mant & ((1u << shift) - 1u);
      const uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      code = q;  // q == 2^kMan is exactly the smallest normal code
    }
  }
  return static_cast<uint8_t>(code | sign);
}

FP8T_HOST_DEVICE float nan_value() { return bits_float(0x7fc00000u); }

template <int kMan, int kBias>
FP8T_HOST_DEVICE float decode_generic(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c & 0x7fu) >> kMan;
  const uint32_t m = c & ((1u << kMan) - 1u);
  if (e == 0) {
    // Subnormal: m * 2^(1 - kBias - kMan), exact in float.
    const float mag = static_cast<float>(m) * bits_float(static_cast<uint32_t>(127 + 1 - kBias - kMan) << 23);
    return bits_float(float_bits(mag) | sign);
  }
  return bits_float(sign | ((e + 127u - kBias) << 23) | (m << (23 - kMan)));
}

}  // namespace detail

// float -> E4M3 code. Max finite 448 (code 0x7E); 0x7F/0xFF are NaN, there is no inf.
FP8T_HOST_DEVICE uint8_t encode_e4m3(float x) { return detail::encode_generic<3, 7, 0x7eu>(x); }
// float -> E5M2 code. Max finite 57344 (code 0x7B); saturation never produces inf (0x7C).
FP8T_HOST_DEVICE uint8_t encode_e5m2(float x) { return detail::encode_generic<2, 15, 0x7bu>(x); }

FP8T_HOST_DEVICE float decode_e4m3(uint8_t c) {
  if ((c & 0x7fu) == 0x7fu) return detail::nan_value();
  return detail::decode_generic<3, 7>(c);
}
FP8T_HOST_DEVICE float decode_e5m2(uint8_t c) {
  const uint32_t a = c & 0x7fu;
  if (a > 0x7cu) return detail::nan_value();
  if (a == 0x7cu) return detail::bits_float((c & 0x80u ? 0x80000000u : 0u) | 0x7f800000u);
  return detail::decode_generic<2, 15>(c);
}

FP8T_HOST_DEVICE uint8_t encode(float x, Format f) { return f == Format::kE4M3 ? encode_e4m3(x) : encode_e5m2(x); }
FP8T_HOST_DEVICE float decode(uint8_t c, Format f) { return f == Format::kE4M3 ? decode_e4m3(c) : decode_e5m2(c); }

}  // namespace fp8
}  // namespace fp8t
