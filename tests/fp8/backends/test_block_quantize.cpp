// lib/numerics/block_math.h and the CPU emulation of the block casts (lib/fp8/backends/block_cpu.cpp,
// block_quantize.cpp) against an independent float64 reference: TE's scale rule evaluated in
// float64, the nearest E4M3 value found by search, odd shapes and edge values.
#include "lib/fp8/backends/block_quantize.h"

#include <c10/util/BFloat16.h>  // c10::BFloat16

#include <cfloat>   // FLT_MAX
#include <cmath>    // std::frexp, std::ldexp, std::isnan, std::isinf
#include <cstring>  // std::memcpy
#include <limits>   // std::numeric_limits
#include <tuple>    // std::tuple
#include <vector>   // std::vector

#include "lib/numerics/block_math.h"  // block_scale_from_amax, layouts
#include "lib/numerics/format.h"      // decode_e4m3
#include "tests/catch.h"

using namespace fp8t::fp8;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// TE's block scale (recipe_common.cuh compute_scale_from_amax, epsilon 0) in float64: the float32
// division is correctly rounded, so rounding the float64 quotient once gives the same float.
float ref_scale(double amax, bool pow2, float value_for_inf) {
  if (!(amax > 0.0) || std::isinf(amax)) return 1.0f;
  float s = static_cast<float>(448.0 / amax);
  if (std::isinf(s)) s = value_for_inf;
  if (!pow2) return s;
  int e = 0;
  std::frexp(static_cast<double>(s), &e);  // s = m * 2^e, m in [0.5, 1)
  return static_cast<float>(std::ldexp(1.0, e - 1));
}

// The E4M3 code nearest to v (ties to the even code), saturating to +-448, by search over the
// finite codes: independent of format.h's bit manipulation.
uint8_t ref_code(double v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint8_t>(0x7e | sign);
  uint8_t best = 0;
  double best_err = a;
  for (int c = 1; c <= 0x7e; ++c) {
    const double err = std::fabs(a - static_cast<double>(decode_e4m3(static_cast<uint8_t>(c))));
    if (err < best_err || (err == best_err && (c & 1) == 0)) best = static_cast<uint8_t>(c), best_err = err;
  }
  return static_cast<uint8_t>(best | sign);
}

// The float64 reference of a cast of x (fp32 values) with blocks of block_rows x 128: codes and
// the scale_inv of every element's block.
struct RefCast {
  std::vector<uint8_t> codes;
  std::vector<float> scale_inv;  // per element
};

RefCast ref_cast(const at::Tensor& x, int block_rows, bool pow2, float value_for_inf) {
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const int64_t rows = xf.size(0), cols = xf.size(1);
  const float* p = xf.data_ptr<float>();
  RefCast r{std::vector<uint8_t>(rows * cols), std::vector<float>(rows * cols)};
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      const int64_t r1 = std::min(r0 + block_rows, rows), c1 = std::min(c0 + int64_t{128}, cols);
      double amax = 0.0;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) {
          if (!std::isnan(p[i * cols + j])) amax = std::max(amax, std::fabs(static_cast<double>(p[i * cols + j])));
        }
      }
      const float s = ref_scale(amax, pow2, value_for_inf);
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) {
          r.codes[i * cols + j] = ref_code(static_cast<double>(p[i * cols + j] * s));  // the product in float32
          r.scale_inv[i * cols + j] = static_cast<float>(1.0 / s);
        }
      }
    }
  }
  return r;
}

// Checks one layout of a cast against the reference of `x` (the tensor that layout holds).
void require_matches_reference(const BlockCodes& q, const at::Tensor& x, int block_rows, bool pow2, float vfi) {
  const int64_t rows = x.size(0), cols = x.size(1);
  REQUIRE(q.codes.sizes() == x.sizes());
  REQUIRE(has_block_scale_layout(q.scale_inv, rows, cols, block_rows));
  const RefCast ref = ref_cast(x, block_rows, pow2, vfi);
  const at::Tensor per_elem = expand_block_scales(q.scale_inv, rows, cols, block_rows);
  const uint8_t* codes = q.codes.data_ptr<uint8_t>();
  const float* sinv = per_elem.data_ptr<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (codes[i] != ref.codes[i] || bits(sinv[i]) != bits(ref.scale_inv[i])) {
      INFO("element " << i << " of " << rows << "x" << cols << ": x=" << x.to(at::kFloat).contiguous().view(-1)[i].item<float>()
           << " code " << int(codes[i]) << " (want " << int(ref.codes[i]) << "), scale_inv " << sinv[i] << " (want "
           << ref.scale_inv[i] << ")");
      REQUIRE(false);
    }
  }
}

// Values over many binades with zeros, like activations and gradients.
at::Tensor spread_values(int64_t rows, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, cols}) * at::pow(2.0, at::randint(-12, 12, {rows, cols}, at::kFloat));
  x.view(-1).slice(0, 0, x.numel(), 13).zero_();
  return x;
}

// Odd shapes (partial blocks in either direction, fewer rows than the 4-row padding) and exact ones.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},    {3, 200},   {5, 128},  {128, 128},
                                                          {130, 257}, {257, 129}, {64, 300}, {6, 1000}};

}  // namespace

TEST_CASE("block_math: TE's scale rule and its edge cases", "[fp8]") {
  REQUIRE(block_scale_from_amax(0.0f, 448.0f, true, FLT_MAX) == 1.0f);  // all-zero (or all-NaN) block
  REQUIRE(block_scale_from_amax(kInf, 448.0f, true, FLT_MAX) == 1.0f);
  REQUIRE(block_scale_from_amax(std::nanf(""), 448.0f, false, FLT_MAX) == 1.0f);
  REQUIRE(block_scale_from_amax(1.0f, 448.0f, false, FLT_MAX) == 448.0f);
  REQUIRE(block_scale_from_amax(1.0f, 448.0f, true, FLT_MAX) == 256.0f);  // rounded DOWN to 2^8
  REQUIRE(block_scale_from_amax(448.0f, 448.0f, true, FLT_MAX) == 1.0f);
  REQUIRE(block_scale_from_amax(3.0f, 448.0f, false, FLT_MAX) == 448.0f / 3.0f);
  REQUIRE(block_scale_from_amax(3.0f, 448.0f, true, FLT_MAX) == 128.0f);  // 149.33 -> 128
  // A subnormal amax overflows the division: TE's value_for_inf (the input dtype's max), then pow2.
  const float tiny = std::ldexp(1.0f, -140);
  REQUIRE(block_scale_from_amax(tiny, 448.0f, false, FLT_MAX) == FLT_MAX);
  REQUIRE(block_scale_from_amax(tiny, 448.0f, false, kBf16Max) == kBf16Max);
  REQUIRE(block_scale_from_amax(tiny, 448.0f, true, FLT_MAX) == std::ldexp(1.0f, 127));
  REQUIRE(kBf16Max == static_cast<float>(c10::BFloat16(0x7f7f, c10::BFloat16::from_bits())));
  // Power-of-2 scales make amax * scale land in (224, 448] and scale_inv exact.
  for (float amax : {1e-30f, 0.001f, 0.7f, 1.0f, 13.0f, 447.9f, 1e6f, 3e38f}) {
    const float s = block_scale_from_amax(amax, 448.0f, true, FLT_MAX);
    CAPTURE(amax, s);
    REQUIRE(amax * s <= 448.0f);
    REQUIRE(amax * s > 224.0f);
    REQUIRE(block_scale_inv(s) * s == 1.0f);
  }
  REQUIRE(block_saturates(448.5f, 448.0f));
  REQUIRE_FALSE(block_saturates(448.0f, 448.0f));  // the block max itself
  REQUIRE_FALSE(block_saturates(std::nanf(""), 448.0f));
}

TEST_CASE("block casts: codes and scales equal the float64 reference, odd shapes, pow2 on and off", "[fp8]") {
  for (const auto& [rows, cols] : kShapes) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      const at::Tensor x = spread_values(rows, cols, rows * 31 + cols).to(dt);
      const float vfi = block_value_for_inf(dt == at::kBFloat16);
      for (bool pow2 : {true, false}) {
        for (int block_rows : {1, 128}) {
          CAPTURE(rows, cols, c10::toString(dt), pow2, block_rows);
          const BlockQuantized q = block_quantize(x, block_rows, true, true, pow2);
          require_matches_reference(q.rowwise, x, block_rows, pow2, vfi);
          // The columnwise copy: 1x128 blocks along the rows of x, from x itself; for 128x128 the
          // same blocks transposed.
          require_matches_reference(q.columnwise, x.t().contiguous(), block_rows, pow2, vfi);
          if (block_rows == 128) REQUIRE(at::equal(q.columnwise.codes, q.rowwise.codes.t()));
        }
      }
    }
  }
}

TEST_CASE("block casts: dequantized values within E4M3 rounding of float64 x", "[fp8]") {
  const at::Tensor x = spread_values(130, 257, 5);
  for (bool pow2 : {true, false}) {
    for (int block_rows : {1, 128}) {
      const BlockQuantized q = block_quantize(x, block_rows, true, false, pow2);
      const at::Tensor deq = block_dequantize(q.rowwise, block_rows).to(at::kDouble);
      const at::Tensor x64 = x.to(at::kDouble);
      const at::Tensor sinv = expand_block_scales(q.rowwise.scale_inv, 130, 257, block_rows).to(at::kDouble);
      // Bound per element: half an E4M3 step, 2^-4 of |x| in the normal range (3 mantissa bits), and
      // half the subnormal step 2^-10 (in scaled units) below 2^-6; the float32 product x * scale
      // and decode * scale_inv add at most 2^-22 relative (also to the subnormal step).
      const at::Tensor bound = at::maximum(x64.abs() * (std::ldexp(1.0, -4) + std::ldexp(1.0, -22)),
                                           sinv * (std::ldexp(1.0, -10) + std::ldexp(1.0, -20)));
      CAPTURE(pow2, block_rows);
      REQUIRE(((deq - x64).abs() <= bound).all().item<bool>());
    }
  }
}

TEST_CASE("block casts: edge values (0, subnormal, max, inf, NaN) and all-zero blocks", "[fp8]") {
  const float sub = std::ldexp(1.0f, -130);  // a float32 subnormal: 448 / sub overflows
  at::Tensor x = at::zeros({4, 256});
  float* p = x.data_ptr<float>();
  // row 0, block 0: ordinary values with an inf -> amax inf -> scale 1.
  p[0] = 1.5f, p[1] = kInf, p[2] = -kInf, p[3] = std::nanf(""), p[4] = 0.01f;
  // row 0, block 1: max and a NaN: the NaN is ignored by the amax.
  p[128] = 448.0f, p[129] = std::nanf(""), p[130] = -1.0f;
  // row 1, block 0: only subnormals -> scale = value_for_inf; block 1: all zero.
  p[256] = sub, p[257] = -sub;
  // row 2: all NaN in block 0 -> scale 1.
  for (int j = 0; j < 128; ++j) p[512 + j] = std::nanf("");
  const BlockQuantized q = block_quantize(x, 1, true, true, true);
  const uint8_t* c = q.rowwise.codes.data_ptr<uint8_t>();
  const at::Tensor s = q.rowwise.scale_inv;  // [4, 2] logical
  REQUIRE(s[0][0].item<float>() == 1.0f);
  REQUIRE(c[0] == encode_e4m3(1.5f));
  REQUIRE(c[1] == 0x7e);  // +inf saturates to 448
  REQUIRE(c[2] == 0xfe);
  REQUIRE(c[3] == 0x7f);  // NaN code
  REQUIRE(s[0][1].item<float>() == 1.0f);  // amax 448 -> scale 1
  REQUIRE(c[128] == 0x7e);
  REQUIRE(c[129] == 0x7f);
  REQUIRE(s[1][0].item<float>() == std::ldexp(1.0f, -127));  // FLT_MAX rounded down to 2^127
  REQUIRE(c[256] == encode_e4m3(sub * std::ldexp(1.0f, 127)));
  REQUIRE(c[256] != 0);
  REQUIRE(s[1][1].item<float>() == 1.0f);  // all-zero block
  REQUIRE(s[2][0].item<float>() == 1.0f);  // all-NaN block
  REQUIRE(c[512] == 0x7f);
  REQUIRE(encode_e4m3(-0.0f) == 0x80);
  // Health statistics: the two infs saturate; no non-zero element flushed; scales 1 .. 2^127.
  const at::Tensor st = block_cast_stats(x, q.rowwise, 1);
  REQUIRE(st[0].item<float>() == Approx(2.0 / 1024));
  REQUIRE(st[1].item<float>() == 0.0f);
  REQUIRE(st[2].item<float>() == 1.0f);
  REQUIRE(st[3].item<float>() == std::ldexp(1.0f, 127));
  REQUIRE(std::isinf(st[4].item<float>()));  // the amax counts inf, ignores NaN
  REQUIRE(block_cast_stats(x.slice(0, 3, 4), block_quantize(x.slice(0, 3, 4), 1, true, false, true).rowwise, 1)[4]
              .item<float>() == 0.0f);
}

TEST_CASE("block casts: scale layouts are cuBLASLt's, padding entries are zero", "[fp8]") {
  const at::Tensor x = spread_values(5, 300, 9) + 1.0;  // no zero block: every real scale_inv > 0
  const BlockQuantized v = block_quantize(x, 1, true, true, true);
  // 1x128 of [5, 300]: buffer [3, 8] (rows padded to 8), logical [5, 3] with strides (1, 8).
  REQUIRE(v.rowwise.scale_inv.sizes() == at::IntArrayRef{5, 3});
  REQUIRE(v.rowwise.scale_inv.strides() == at::IntArrayRef{1, 8});
  const at::Tensor buf = at::from_blob(v.rowwise.scale_inv.data_ptr<float>(), {3, 8});
  REQUIRE((buf.slice(1, 0, 5) > 0).all().item<bool>());
  REQUIRE((buf.slice(1, 5, 8) == 0).all().item<bool>());
  // Columnwise [300, 5]: 1x128 blocks along the 5 rows: [300, 1] with strides (1, 300).
  REQUIRE(v.columnwise.scale_inv.sizes() == at::IntArrayRef{300, 1});
  REQUIRE(has_block_scale_layout(v.columnwise.scale_inv, 300, 5, 1));
  // 128x128 of [5, 300]: [1, 3] with the row stride padded to 4; the transposed grid [3, 1].
  const BlockQuantized b = block_quantize(x, 128, true, true, true);
  REQUIRE(b.rowwise.scale_inv.sizes() == at::IntArrayRef{1, 3});
  REQUIRE(at::from_blob(b.rowwise.scale_inv.data_ptr<float>(), {4})[3].item<float>() == 0.0f);
  REQUIRE(has_block_scale_layout(b.columnwise.scale_inv, 300, 5, 128));
  REQUIRE(at::equal(b.columnwise.scale_inv, b.rowwise.scale_inv.t()));
  REQUIRE_FALSE(has_block_scale_layout(b.rowwise.scale_inv.contiguous(), 5, 300, 1));
  REQUIRE(describe_block_scale_layout(5, 300, 1) == "[5, 3] float32 with strides (1, 8)");
}

TEST_CASE("block casts: fp16 and fp64 inputs give the codes of their fp32 values", "[fp8]") {
  const at::Tensor x = spread_values(17, 140, 3).to(at::kHalf);
  const BlockQuantized a = block_quantize(x, 1, true, true, true);
  const BlockQuantized b = block_quantize(x.to(at::kFloat), 1, true, true, true);
  REQUIRE(at::equal(a.rowwise.codes, b.rowwise.codes));
  REQUIRE(at::equal(a.columnwise.scale_inv, b.columnwise.scale_inv));
}
