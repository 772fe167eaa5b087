// lib/fp8/recipes/delayed_scaling.* (+ scaling_math.h through the CPU backend) on scripted amax sequences.
#include "lib/fp8/recipes/delayed_scaling.h"

#include <algorithm>  // std::rotate
#include <cfloat>     // FLT_MAX
#include <cmath>      // std::isfinite, std::ldexp
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937
#include <string>     // std::string

#include "lib/util/error.h"  // fp8t::Error
#include "tests/catch.h"

using namespace fp8t::fp8;

namespace {

// Independent reference of the update (written from TE's fused kernel as docs/fp8.md states it,
// not from scaling_math.h).
struct RefSlot {
  std::vector<float> h;
  float scale = 1.0f, scale_inv = 1.0f;
};

void ref_update(RefSlot& s, float fmax, int margin, bool use_max, bool recompute) {
  const float current = s.h[0];
  if (current == 0.0f) return;  // no new amax: no roll, no new scale
  std::rotate(s.h.begin(), s.h.begin() + 1, s.h.end());  // the window: h[1..L-1], current
  float amax = current;
  if (use_max) {
    amax = 0.0f;
    for (float v : s.h) amax = std::fmax(amax, v);  // fmax ignores NaN entries
  }
  s.h[0] = 0.0f;
  if (recompute) {
    if (amax > 0.0f && std::isfinite(amax)) {
      const float sn = (fmax * std::ldexp(1.0f, -margin)) / amax;
      s.scale = std::isinf(sn) ? FLT_MAX : sn;
    }
    s.scale_inv = 1.0f / s.scale;
  }
}

Recipe recipe_with(int history, AmaxComputeAlgo algo, int margin = 0, int interval = 1) {
  Recipe r;
  r.amax_history_len = history;
  r.amax_compute_algo = algo;
  r.margin = margin;
  r.interval = interval;
  return r;
}

// Feed one amax per step into slot 0 and return the scale after each update.
std::vector<float> run_sequence(const Recipe& r, const std::vector<float>& amaxes, Format f = Format::kE4M3) {
  DelayedScaling ds(r);
  ds.add_slot("x", f);
  ds.finalize(at::kCPU);
  std::vector<float> scales;
  for (float a : amaxes) {
    ds.slot(0).amax.fill_(a);
    ds.update();
    scales.push_back(ds.scale()[0].item<float>());
    REQUIRE(ds.scale_inv()[0].item<float>() == 1.0f / scales.back());
  }
  return scales;
}

}  // namespace

TEST_CASE("delayed scaling: history 3, max algorithm (hand-computed)", "[fp8]") {
  // h after each update: [0,0,1] [0,1,4] [0,4,2] [0,2,.5] -> amax 1, 4, 4, 4, 2.
  const auto s = run_sequence(recipe_with(3, AmaxComputeAlgo::kMax), {1.0f, 4.0f, 2.0f, 0.5f, 0.5f});
  REQUIRE(s == std::vector<float>{448.0f, 112.0f, 112.0f, 112.0f, 224.0f});
}

TEST_CASE("delayed scaling: most_recent uses only the current step", "[fp8]") {
  const auto s = run_sequence(recipe_with(3, AmaxComputeAlgo::kMostRecent), {1.0f, 4.0f, 2.0f, 0.5f});
  REQUIRE(s == std::vector<float>{448.0f, 112.0f, 224.0f, 896.0f});
}

TEST_CASE("delayed scaling: margin divides by 2^margin; E5M2 uses 57344", "[fp8]") {
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax, 2), {2.0f}) == std::vector<float>{56.0f});
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax, -2), {2.0f}) == std::vector<float>{896.0f});
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax, 0), {2.0f}, Format::kE5M2) ==
          std::vector<float>{28672.0f});
}

TEST_CASE("delayed scaling: the scale is (fp8_max * 2^-margin) / amax, one rounding as in TE", "[fp8]") {
  // 448 / 2^-120 overflows, (448 / 4) / 2^-120 = 112 * 2^120 does not: the old order
  // (fp8_max / amax) / 2^margin gave FLT_MAX here.
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax, 2), {std::ldexp(1.0f, -120)}) ==
          std::vector<float>{std::ldexp(112.0f, 120)});
  // A subnormal scale, rounded once (dividing by 2^17 after rounding 448 / amax differs here).
  const float amax = 7.926375814311875e37f;
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax, 17), {amax}) ==
          std::vector<float>{(448.0f * std::ldexp(1.0f, -17)) / amax});
  REQUIRE((448.0f * std::ldexp(1.0f, -17)) / amax != (448.0f / amax) / std::ldexp(1.0f, 17));
  REQUIRE_THROWS_AS(DelayedScaling(recipe_with(1, AmaxComputeAlgo::kMax, 18)), fp8t::Error);
}

TEST_CASE("delayed scaling: zero, inf and NaN amax keep the old scale; tiny amax gives FLT_MAX", "[fp8]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax), {0.0f}) == std::vector<float>{1.0f});
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax), {2.0f, 0.0f, inf, nan, 4.0f}) ==
          std::vector<float>{224.0f, 224.0f, 224.0f, 224.0f, 112.0f});
  // TE's fused kernel takes the window max with fmaxf: a NaN entry (only a reduced or restored
  // amax can be NaN: casts ignore NaN elements) is ignored, it does not freeze the scale.
  // (fp8train before TE parity propagated it: 224 until the NaN rolled out.)
  REQUIRE(run_sequence(recipe_with(3, AmaxComputeAlgo::kMax), {2.0f, nan, 4.0f, 4.0f, 4.0f}) ==
          std::vector<float>{224.0f, 224.0f, 112.0f, 112.0f, 112.0f});
  REQUIRE(run_sequence(recipe_with(1, AmaxComputeAlgo::kMax), {1e-40f}) == std::vector<float>{FLT_MAX});
}

TEST_CASE("delayed scaling: a zero amax neither rolls the history nor changes the scale", "[fp8]") {
  // TE's fused update skips a slot whose current amax is 0. fp8train used to roll, so the 4
  // left the window after two zero steps and the scale rose to 448 at the last update.
  DelayedScaling ds(recipe_with(3, AmaxComputeAlgo::kMax));
  ds.add_slot("x", Format::kE4M3);
  ds.finalize(at::kCPU);
  for (float a : {4.0f, 0.0f, 0.0f, 0.0f, 1.0f}) {
    ds.slot(0).amax.fill_(a);
    ds.update();
    REQUIRE(ds.scale()[0].item<float>() == 112.0f);
  }
  REQUIRE(at::equal(ds.amax_history().view({-1}), at::tensor({0.0f, 4.0f, 1.0f})));
}

TEST_CASE("delayed scaling: interval recomputes every n-th update while the history rolls", "[fp8]") {
  const auto s = run_sequence(recipe_with(1, AmaxComputeAlgo::kMostRecent, 0, 2), {1.0f, 4.0f, 2.0f, 0.5f, 8.0f});
  REQUIRE(s == std::vector<float>{1.0f, 112.0f, 112.0f, 896.0f, 896.0f});
}

TEST_CASE("delayed scaling: many slots match the reference on random sequences", "[fp8]") {
  for (int history : {1, 2, 16}) {
    for (auto algo : {AmaxComputeAlgo::kMax, AmaxComputeAlgo::kMostRecent}) {
      for (int margin : {0, 3, -3}) {
        const Recipe r = recipe_with(history, algo, margin, history == 2 ? 3 : 1);
        DelayedScaling ds(r);
        std::vector<RefSlot> ref(5);
        std::vector<float> fmax;
        for (int i = 0; i < 5; ++i) {
          const Format f = i % 2 ? Format::kE5M2 : Format::kE4M3;
          std::string name = "s";  // appended: GCC 12 warns falsely (-Wstringop-overflow) on "s" + a temporary
          name += std::to_string(i);
          ds.add_slot(name, f);
          ref[i].h.assign(history, 0.0f);
          fmax.push_back(format_max(f));
        }
        ds.finalize(at::kCPU);
        std::mt19937 rng(history * 10 + margin + 3);
        std::uniform_real_distribution<float> mag(-20.0f, 20.0f);
        for (int step = 1; step <= 40; ++step) {
          for (int i = 0; i < 5; ++i) {
            float a = std::ldexp(1.3f, static_cast<int>(mag(rng)));
            if (rng() % 11 == 0) a = 0.0f;
            ds.slot(i).amax.fill_(a);
            ref[i].h[0] = a;
            ref_update(ref[i], fmax[i], margin, algo == AmaxComputeAlgo::kMax, step % r.interval == 0);
          }
          ds.update();
          for (int i = 0; i < 5; ++i) {
            INFO("history " << history << " margin " << margin << " step " << step << " slot " << i);
            REQUIRE(ds.scale()[i].item<float>() == ref[i].scale);
            REQUIRE(ds.scale_inv()[i].item<float>() == ref[i].scale_inv);
            for (int k = 0; k < history; ++k) REQUIRE(ds.amax_history()[k][i].item<float>() == ref[i].h[k]);
          }
        }
      }
    }
  }
}

TEST_CASE("delayed scaling: casts that do not record leave the state alone", "[fp8]") {
  DelayedScaling ds(recipe_with(4, AmaxComputeAlgo::kMax));
  ds.add_slot("x", Format::kE4M3);
  ds.finalize(at::kCPU);
  ds.slot(0, /*record=*/false).amax.fill_(100.0f);
  REQUIRE(ds.amax_history().abs().sum().item<float>() == 0.0f);
  ds.slot(0, /*record=*/true).amax.fill_(7.0f);
  REQUIRE(ds.amax_history()[0][0].item<float>() == 7.0f);
}

TEST_CASE("delayed scaling: state round trip continues identically", "[fp8]") {
  const Recipe r = recipe_with(8, AmaxComputeAlgo::kMax, 1, 2);
  auto make = [&] {
    auto ds = std::make_unique<DelayedScaling>(r);
    ds->add_slot("a", Format::kE4M3);
    ds->add_slot("b", Format::kE5M2);
    ds->finalize(at::kCPU);
    return ds;
  };
  auto a = make();
  for (int step = 0; step < 5; ++step) {
    a->slot(0).amax.fill_(1.5f * (step + 1));
    a->slot(1).amax.fill_(100.0f / (step + 1));
    a->update();
  }
  auto b = make();
  std::map<std::string, at::Tensor> saved;
  for (const auto& [k, v] : a->state_dict()) saved[k] = v.clone();
  b->load_state_dict(saved);
  REQUIRE(b->update_count() == 5);
  for (int step = 0; step < 4; ++step) {
    for (auto* ds : {a.get(), b.get()}) {
      ds->slot(0).amax.fill_(3.0f + step);
      ds->slot(1).amax.fill_(0.25f * step);
      ds->update();
    }
    REQUIRE(at::equal(a->scale(), b->scale()));
    REQUIRE(at::equal(a->amax_history(), b->amax_history()));
  }
  auto c = std::make_unique<DelayedScaling>(recipe_with(4, AmaxComputeAlgo::kMax));
  c->add_slot("a", Format::kE4M3);
  c->add_slot("b", Format::kE5M2);
  c->finalize(at::kCPU);
  REQUIRE_THROWS_AS(c->load_state_dict(saved), fp8t::Error);  // history length differs
}
