// lib/numerics/format.h against CUDA's own host conversions (cuda_fp8.h), bit for bit.
#include "lib/numerics/format.h"

#include <cmath>    // std::isnan, std::signbit, std::ldexp
#include <cstring>  // std::memcpy
#include <limits>   // std::numeric_limits
#include <random>   // std::mt19937_64

#include "tests/catch.h"

#if defined(FP8T_HAVE_CUDA_FP8_H)
#include <cuda_fp8.h>  // __nv_cvt_float_to_fp8, __nv_cvt_fp8_to_halfraw (host versions)
#endif

using fp8t::fp8::Format;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

TEST_CASE("format: known values of both formats", "[fp8]") {
  using namespace fp8t::fp8;
  REQUIRE(encode_e4m3(448.0f) == 0x7e);
  REQUIRE(encode_e4m3(1e9f) == 0x7e);                                     // saturates
  REQUIRE(encode_e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);  // -inf -> -max
  REQUIRE(encode_e4m3(std::nanf("")) == 0x7f);
  REQUIRE(encode_e4m3(464.0f) == 0x7e);            // exact tie 448|480 rounds to even (448)
  REQUIRE(encode_e4m3(std::ldexp(1.0f, -9)) == 0x01);   // smallest subnormal
  REQUIRE(encode_e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half of it: tie to even -> 0
  REQUIRE(encode_e4m3(-0.0f) == 0x80);
  REQUIRE(encode_e5m2(57344.0f) == 0x7b);
  REQUIRE(encode_e5m2(std::numeric_limits<float>::infinity()) == 0x7b);
  REQUIRE(decode_e4m3(0x7e) == 448.0f);
  REQUIRE(decode_e5m2(0x7b) == 57344.0f);
  REQUIRE(std::isinf(decode_e5m2(0x7c)));
  REQUIRE(std::isnan(decode_e4m3(0xff)));
  REQUIRE(decode_e4m3(0x01) == std::ldexp(1.0f, -9));
  REQUIRE(decode_e5m2(0x01) == std::ldexp(1.0f, -16));
}

TEST_CASE("format: every code round-trips through decode and encode", "[fp8]") {
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (int c = 0; c < 256; ++c) {
      const float v = fp8t::fp8::decode(static_cast<uint8_t>(c), f);
      if (std::isnan(v) || std::isinf(v)) continue;
      INFO("format " << fp8t::fp8::format_name(f) << " code " << c);
      REQUIRE(fp8t::fp8::encode(v, f) == c);
    }
  }
}

#if defined(FP8T_HAVE_CUDA_FP8_H)
namespace {
__nv_fp8_interpretation_t cuda_fmt(Format f) { return f == Format::kE4M3 ? __NV_E4M3 : __NV_E5M2; }
}  // namespace

TEST_CASE("format: all 256 codes decode exactly as cuda_fp8.h", "[fp8][cuda_fp8_h]") {
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (int c = 0; c < 256; ++c) {
      const float ours = fp8t::fp8::decode(static_cast<uint8_t>(c), f);
      const float ref = __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), cuda_fmt(f))));
      INFO("format " << fp8t::fp8::format_name(f) << " code " << c);
      if (std::isnan(ref)) {
        REQUIRE(std::isnan(ours));
      } else {
        REQUIRE(ours == ref);
        REQUIRE(std::signbit(ours) == std::signbit(ref));
      }
    }
  }
}

TEST_CASE("format: encoding matches cuda_fp8.h bit for bit", "[fp8][cuda_fp8_h]") {
  // Three sweeps, 2^24 + 2^22 + 4M floats per format: (1) every float whose exponent lies in
  // or near the FP8 range with all mantissas of a stride-7 grid (covers ties, subnormals,
  // the max boundary); (2) a dense walk of all mantissas around the saturation thresholds
  // and the subnormal range; (3) random bit patterns (inf, NaN, huge, tiny included).
  int64_t checked = 0;
  auto check = [&](uint32_t bits) {
    const float x = from_bits(bits);
    for (Format f : {Format::kE4M3, Format::kE5M2}) {
      const uint8_t ours = fp8t::fp8::encode(x, f);
      const uint8_t ref = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, cuda_fmt(f));
      if (ours != ref) {
        FAIL("x=" << x << " bits=0x" << std::hex << bits << " format " << fp8t::fp8::format_name(f) << " ours=0x"
                  << int(ours) << " cuda=0x" << int(ref));
      }
    }
    ++checked;
  };
  for (uint32_t e = 100; e <= 150; ++e) {           // 2^-27 .. 2^23
    for (uint32_t m = 0; m < (1u << 23); m += 7) check((e << 23) | m | ((m & 1u) << 31));
  }
  for (uint32_t e : {115u, 116u, 117u, 118u, 119u, 120u, 134u, 135u, 141u, 142u, 143u}) {
    for (uint32_t m = 0; m < (1u << 23); m += 3) check((e << 23) | m);
  }
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 4'000'000; ++i) check(static_cast<uint32_t>(rng()));
  for (uint32_t special : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                           0x7f800001u, 0x00000001u, 0x807fffffu}) {
    check(special);
  }
  REQUIRE(checked > 20'000'000);
}
#else
// Runs wherever the CUDA toolkit's headers are found at build time (CI and scripts/device-test.sh:
// ctest `fp8`); no GPU is needed, only cuda_fp8.h's host conversions.
TEST_CASE("format: the codec against cuda_fp8.h", "[fp8][cuda_fp8_h]") {
  SKIP("the CUDA toolkit (cuda_fp8.h) was not found at build time: the codec is not compared with CUDA's");
}
#endif
