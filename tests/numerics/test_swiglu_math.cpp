// lib/numerics/swiglu_math.h: the host/device SwiGLU formulas equal the unfused LibTorch path on the
// CPU bit for bit (the CUDA kernels evaluate the same functions; tests/kernels/test_swiglu_cast.cpp
// closes the loop on the GPU).
#include "lib/numerics/swiglu_math.h"

#include <ATen/Version.h>  // at::get_cpu_capability
#include <torch/torch.h>   // at::silu, at::randn

#include <cmath>   // std::exp, std::nextafter, std::isnan, std::isinf
#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

#include "tests/catch.h"
#include "tests/fp8/swiglu_test_util.h"

using namespace fp8t;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Values where exp and silu change regime: zeros, subnormals, the overflow (88.72) and underflow
// (-87.3 .. -103.97) ranges of exp, the limits at 100 and -104, huge values, inf and NaN.
const std::vector<float> kEdges = {0.0f,    -0.0f,    1e-45f,   -1e-45f, 1e-40f,  -1e-40f, 1e-8f,   -1e-8f,
                                   0.5f,    -0.5f,    20.0f,    -20.0f,  87.3f,   -87.3f,  88.72f,  -88.72f,
                                   89.0f,   -89.0f,   100.0f,   -100.0f, 100.5f,  -100.5f, 103.9f,  -103.9f,
                                   104.0f,  -104.0f,  104.5f,   -104.5f, 1e30f,   -1e30f,  3.4e38f, -3.4e38f,
                                   kInf,    -kInf,    std::numeric_limits<float>::quiet_NaN()};

// 16384 values: normal(0, 4) with every 97th replaced by a scaled-up one, and the edge values
// first. 16384 keeps ATen's elementwise loop on one thread in whole vectors (no scalar tail).
at::Tensor probe_values(uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({16384}) * 4.0;
  x.slice(0, 0, 16384, 97).mul_(16.0);
  for (size_t i = 0; i < kEdges.size(); ++i) x[static_cast<int64_t>(i)] = kEdges[i];
  return x;
}

at::Tensor math_silu(const at::Tensor& x) {
  const at::Tensor xf = x.contiguous();
  at::Tensor y = at::empty_like(xf);
  for (int64_t i = 0; i < xf.numel(); ++i) y.data_ptr<float>()[i] = fp8::silu(xf.data_ptr<float>()[i]);
  return y;
}

// Exact equality where ATen's CPU kernel uses its vectorised exp; elsewhere (a build without
// AVX2) it calls std::exp, and 2 ulp of FP32 (both exps are within 1 ulp) is the bound.
void require_matches_aten(const at::Tensor& got, const at::Tensor& aten, const char* what) {
  INFO(what << ", ATen CPU capability " << at::get_cpu_capability());
  if (test::aten_cpu_uses_vector_exp()) {
    const test::BitDiff d = test::bit_diff(got, aten);
    INFO(d.count << " elements differ, first at " << d.first);
    REQUIRE(d.count == 0);
  } else {
    const at::Tensor g = got.to(at::kDouble), a = aten.to(at::kDouble);
    const at::Tensor finite = a.isfinite();
    const at::Tensor err = (g - a).abs().masked_select(finite);
    const at::Tensor bound = a.abs().masked_select(finite) * std::ldexp(1.0, -22) + 1e-44;
    REQUIRE((err <= bound).all().item<bool>());
  }
}

bool same_bits(float a, float b) { return fp8::detail::float_bits(a) == fp8::detail::float_bits(b); }

}  // namespace

TEST_CASE("swiglu math: vector_exp is within 1 ulp of exp, with ATen's limits", "[fp8]") {
  at::Tensor x = probe_values(3);
  x = x.masked_select(x.abs() < 80.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data_ptr<float>()[i];
    const float got = fp8::vector_exp(v);
    const double want = std::exp(static_cast<double>(v));
    const double ulp = std::nextafter(static_cast<float>(want), kInf) - static_cast<float>(want);
    INFO("x = " << v);
    REQUIRE(std::fabs(got - want) <= ulp);
  }
  REQUIRE(fp8::vector_exp(0.0f) == 1.0f);
  REQUIRE(fp8::vector_exp(-104.5f) == 0.0f);  // below -104: 0 (SLEEF's underflow limit)
  REQUIRE(fp8::vector_exp(-103.9f) > 0.0f);   // a subnormal
  REQUIRE(std::isinf(fp8::vector_exp(89.0f)));
  REQUIRE(std::isinf(fp8::vector_exp(kInf)));
  REQUIRE(fp8::vector_exp(-kInf) == 0.0f);
  REQUIRE(std::isnan(fp8::vector_exp(std::numeric_limits<float>::quiet_NaN())));
}

// Every 4096th float bit pattern (both signs, every exponent: 2^20 values) and every float in
// the two ranges where exp's limits and its scaling by 2^q decide the result, [-101, -88] (silu
// of those reads exp(-x) near its overflow and the limit at 100) and [86, 105] (exp(-x) in its
// subnormal results and the limit at -104): silu equals at::silu's vectorised CPU kernel bit for
// bit on all of them. at::silu gets 16384 values per call (whole vectors on one thread, as in
// probe_values).
TEST_CASE("swiglu math: silu is ATen's CPU silu bit for bit across the float line", "[fp8]") {
  if (!test::aten_cpu_uses_vector_exp()) {
    SKIP("ATen's CPU silu calls std::exp here (capability " << at::get_cpu_capability() << ")");
  }
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4096) {
    xs.push_back(fp8::detail::bits_float(static_cast<uint32_t>(u + 1234)));
  }
  for (const auto& [lo, hi] : {std::pair<float, float>{-101.0f, -88.0f}, {86.0f, 105.0f}}) {
    for (float v = lo; v <= hi; v = std::nextafter(v, kInf)) xs.push_back(v);
  }
  while (xs.size() % 16384 != 0) xs.push_back(0.0f);
  int64_t differ = 0;
  float first = 0.0f;
  for (size_t off = 0; off < xs.size(); off += 16384) {
    const at::Tensor x = at::from_blob(xs.data() + off, {16384}, at::kFloat);
    const test::BitDiff d = test::bit_diff(math_silu(x), at::silu(x));
    if (d.count > 0 && differ == 0) first = x.data_ptr<float>()[d.first];
    differ += d.count;
  }
  INFO(xs.size() << " values, " << differ << " differ, the first at x = " << first);
  REQUIRE(differ == 0);
}

TEST_CASE("swiglu math: silu is ATen's CPU silu bit for bit, fp32 and bf16", "[fp8]") {
  for (uint64_t seed : {1, 2, 3}) {
    const at::Tensor x = probe_values(seed);
    require_matches_aten(math_silu(x), at::silu(x), "fp32");
    const at::Tensor xb = x.to(at::kBFloat16);
    require_matches_aten(math_silu(xb.to(at::kFloat)).to(at::kBFloat16), at::silu(xb), "bf16");
  }
}

TEST_CASE("swiglu math: forward and backward are the autograd of at::silu(gate) * up, bit for bit",
          "[fp8]") {
  // F a multiple of 64 and rows * F <= 16384: ATen's loops run whole vectors on one thread.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{37, 64}, {100, 128}, {8, 256}};
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, f] : shapes) {
      CAPTURE(c10::toString(dt), rows, f);
      at::manual_seed(rows * f);
      at::Tensor h = at::randn({rows, 2 * f}) * 3.0;
      h.view({-1}).slice(0, 0, static_cast<int64_t>(kEdges.size())).copy_(at::tensor(kEdges));
      h = h.to(dt);
      const at::Tensor dy = (at::randn({rows, f}) * at::pow(2.0, at::randint(-6, 6, {rows, f}))).to(dt);
      require_matches_aten(test::math_swiglu(h), test::unfused_swiglu(h), "forward");
      require_matches_aten(test::math_swiglu_backward(dy, h), test::unfused_swiglu_backward(dy, h), "backward");
    }
  }
}

TEST_CASE("swiglu math: the bf16 gate table and its closed forms give the formula's bits for every bf16 gate",
          "[fp8]") {
  const test::Bf16Round round;
  std::vector<fp8::SiluOfGate> table(fp8::kSiluTableSize);
  for (int i = 0; i < fp8::kSiluTableSize; ++i) table[i] = fp8::silu_of_gate(fp8::silu_table_gate(i), round);
  const auto lookup = [&](int i) { return table.at(static_cast<size_t>(i)); };

  // Entry i is the one silu_of_bf16_gate reads for silu_table_gate(i): a table of markers.
  const auto marker = [](int i) { return fp8::SiluOfGate{static_cast<float>(i), 0.0f}; };
  int64_t misplaced = 0;
  for (int i = 0; i < fp8::kSiluTableSize; ++i) {
    misplaced += fp8::silu_of_bf16_gate(fp8::silu_table_gate(i), marker, round).silu != static_cast<float>(i);
  }
  REQUIRE(misplaced == 0);

  // Every bf16 gate: silu and sig bit for bit (inf and NaN take the formula, so even NaN bits
  // match), and through the forward and the backward at a few up and dy values.
  const float ups[] = {1.5f, -0.375f, 3.0e38f, 0.0f};
  int64_t differ = 0, first = -1, tiny = 0, large = 0, tabulated = 0;
  for (uint32_t b = 0; b < 65536u; ++b) {
    const float g = fp8::detail::bits_float(b << 16);
    const fp8::SiluOfGate want = fp8::silu_of_gate(g, round), got = fp8::silu_of_bf16_gate(g, lookup, round);
    bool same = same_bits(got.silu, want.silu) && same_bits(got.sig, want.sig);
    for (const float u : ups) {
      const fp8::SwigluGrad wg = fp8::swiglu_backward(u * 0.25f, g, u, round);
      const fp8::SwigluGrad gg = fp8::swiglu_backward_given(u * 0.25f, g, u, got, round);
      same = same && same_bits(fp8::swiglu_given(got.silu, u, round), fp8::swiglu(g, u, round)) &&
             same_bits(gg.gate, wg.gate) && same_bits(gg.up, wg.up);
    }
    if (!same && first < 0) first = b;
    differ += !same;
    const uint32_t e = (b >> 7) & 0xFFu;
    tiny += e < fp8::kSiluTableExpLo;
    tabulated += e >= fp8::kSiluTableExpLo && e <= fp8::kSiluTableExpHi;
    large += e > fp8::kSiluTableExpHi && e < 255u;
  }
  INFO(differ << " bf16 gates differ from the formula, the first with bits " << first);
  REQUIRE(differ == 0);
  // The classes as the table's range makes them: every bf16 gate is in one.
  CHECK(tabulated == fp8::kSiluTableSize);
  CHECK(tiny == 2 * 102 * 128);
  CHECK(large == 2 * (254 - 133) * 128);
}

namespace {

// Factors for up and dy in the bound checks: zeros, the smallest subnormals (where the products
// of the backward turn subnormal and its roundings are largest relative to the value), every
// binade in steps of 7 with mixed mantissas, the largest floats, inf and NaN, both signs.
std::vector<float> bound_factors() {
  std::vector<float> f = {0.0f, -0.0f, 0x1p-149f, -0x1p-133f, 0x1.8p-140f, 3.0e38f, -kInf, kInf,
                          std::numeric_limits<float>::quiet_NaN()};
  for (int e = -149; e <= 127; e += 7) f.push_back((e % 2 == 0 ? 1.0f : -1.0f) * std::ldexp(1.0f + (e & 63) / 64.0f, e));
  return f;
}

// Where |value| exceeds its bound (NaN values never count; a NaN bound only with values 0 or NaN).
bool exceeds(float value, float bound) {
  if (std::isnan(value)) return false;
  if (std::isnan(bound)) return value != 0.0f;
  return std::fabs(value) > bound;
}

struct BoundCheck {
  int64_t points = 0, violations = 0;
  float gate = 0.0f, up = 0.0f, dy = 0.0f;
  void add(bool violated, float g, float u, float d) {
    ++points;
    if (violated && violations++ == 0) gate = g, up = u, dy = d;
  }
};

template <typename Round>
void check_bounds_at(float g, const fp8::SiluOfGate& s, const std::vector<float>& factors, Round round,
                     BoundCheck& c) {
  for (const float u : factors) {
    c.add(exceeds(fp8::swiglu_given(s.silu, u, round), fp8::swiglu_bound(g, u)), g, u, 0.0f);
    for (const float d : factors) {
      const fp8::SwigluGrad v = fp8::swiglu_backward_given(d, g, u, s, round);
      const float b = fp8::swiglu_backward_bound(d, g, u);
      c.add(exceeds(v.gate, b) || exceeds(v.up, b), g, u, d);
    }
  }
}

}  // namespace

// The bounds of |value| that let kernels/amax.cu skip points: never below the value, over every
// bf16 gate (bf16 rounding) and 2^16 fp32 gates across the float line (no rounding), against up
// and dy from the subnormals to inf, both signs, and NaN.
TEST_CASE("swiglu math: the amax pass's bounds are never below |value|, forward and backward", "[fp8]") {
  const std::vector<float> factors = bound_factors();
  BoundCheck bf16, fp32;
  const test::Bf16Round round;
  for (uint32_t b = 0; b < 65536u; ++b) {
    const float g = fp8::detail::bits_float(b << 16);
    check_bounds_at(g, fp8::silu_of_gate(g, round), factors, round, bf16);
    const float gf = fp8::detail::bits_float((b << 16) | ((b * 2654435761u) & 0xFFFFu));
    check_bounds_at(gf, fp8::silu_of_gate(gf, fp8::IdentityRound{}), factors, fp8::IdentityRound{}, fp32);
  }
  for (const BoundCheck* c : {&bf16, &fp32}) {
    INFO(c->violations << " of " << c->points << " points above their bound (" << (c == &bf16 ? "bf16" : "fp32")
                       << "), the first at gate " << c->gate << ", up " << c->up << ", dy " << c->dy);
    REQUIRE(c->violations == 0);
  }
  REQUIRE(bf16.points == int64_t{65536} * static_cast<int64_t>(factors.size() * (factors.size() + 1)));
}
