// lib/gemm/gemm_autotune.h's rule (host) and the engine's autotuning on the GPU: tuned GEMMs give
// the products of untuned ones (within the same tolerances), accumulating GEMMs and plans made
// during CUDA-graph capture are not timed, and (with FP8T_TEST_REPORT) what tuning finds for the
// LLaMA-1B step's GEMMs.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAGraph.h>    // at::cuda::CUDAGraph
#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAStreamGuard
#include <c10/cuda/CUDAStream.h>    // c10::cuda::getStreamFromPool

#include <cmath>    // std::ldexp
#include <cstdio>   // std::printf
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/gemm/gemm_autotune.h"  // pick_candidate, CandidateTime
#include "lib/gemm/gemm_engine.h"    // GemmEngine, fp8_gemm, bf16_gemm
#include "tests/kernels/cuda_test_util.h"

namespace {

using fp8t::gemm::CandidateTime;
using fp8t::gemm::GemmEngine;
using fp8t::gemm::pick_candidate;
using namespace fp8t::test;

// Autotuning on while it lives (the engine is process-wide: other tests keep the default, off).
class AutotuneOn {
 public:
  AutotuneOn() { GemmEngine::instance().set_autotune(true); }
  ~AutotuneOn() { GemmEngine::instance().set_autotune(false); }
  AutotuneOn(const AutotuneOn&) = delete;
  AutotuneOn& operator=(const AutotuneOn&) = delete;
};

size_t tuned_plans() { return GemmEngine::instance().tuning_log().size(); }

// FP8 codes of N(0, sigma) values on the GPU (never zeros, no NaN codes: randn stays far from the
// formats' limits at these sigmas).
at::Tensor gpu_codes(int64_t rows, int64_t cols, at::ScalarType fp8_dtype, double sigma, uint64_t seed) {
  at::manual_seed(seed);
  return (at::randn({rows, cols}, on_cuda(at::kFloat)) * sigma).to(fp8_dtype).view(at::kByte);
}

}  // namespace

TEST_CASE("gemm autotune: the rule keeps the heuristic's first choice unless another is 3% faster", "[gemm]") {
  REQUIRE(pick_candidate({}) == 0);
  REQUIRE(pick_candidate({{0, 1.0}}) == 0);
  REQUIRE(pick_candidate({{0, 1.0}, {1, 0.98}, {2, 0.99}}) == 0);  // 2% faster: within the margin
  REQUIRE(pick_candidate({{0, 1.0}, {1, 0.98}, {2, 0.95}}) == 2);  // 5% faster: the fastest wins
  REQUIRE(pick_candidate({{0, 1.0}, {1, 0.90}, {2, 0.95}}) == 1);
  REQUIRE(pick_candidate({{0, 1.0}, {1, 1.5}}) == 0);               // slower candidates never win
  REQUIRE(pick_candidate({{0, 1.0}, {1, -1.0}, {2, 0.5}}) == 2);    // a failed candidate is skipped
  REQUIRE(pick_candidate({{0, -1.0}, {1, 2.0}, {2, 1.5}}) == 2);    // the first failed: the fastest that ran
  REQUIRE(pick_candidate({{0, -1.0}, {1, -1.0}}) == 0);
  REQUIRE(pick_candidate({{0, 1.0}, {1, 0.9}}, /*margin=*/0.2) == 0);
}

TEST_CASE("gemm autotune: tuned FP8 and BF16 GEMMs give the product; one record per new plan", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const AutotuneOn on;
  // Shapes no other test uses, so that the plans are made here (the cache is process-wide).
  const int64_t m = 1000, k = 512, n = 768;
  const at::Tensor a = gpu_codes(m, k, at::kFloat8_e4m3fn, 0.5, 3), b = gpu_codes(n, k, at::kFloat8_e4m3fn, 0.5, 4);
  const at::Tensor one = at::ones({}, on_cuda(at::kFloat));
  const at::Tensor ref = at::mm(a.view(at::kFloat8_e4m3fn).to(at::kDouble), b.view(at::kFloat8_e4m3fn).to(at::kDouble).t());
  const size_t before = tuned_plans();
  const at::Tensor got = fp8t::gemm::fp8_gemm(a, fp8t::fp8::Format::kE4M3, one, b, fp8t::fp8::Format::kE4M3, one,
                                              at::Tensor(), at::kFloat, /*fast_accum=*/false, "autotune test");
  REQUIRE(tuned_plans() == before + 1);
  const fp8t::gemm::TuneRecord rec = GemmEngine::instance().tuning_log().back();
  CAPTURE(rec.problem, rec.heuristic_ms, rec.chosen_ms, rec.chosen_rank, rec.candidates);
  REQUIRE(rec.problem.find("1000x512x768") != std::string::npos);
  REQUIRE(rec.candidates >= 1);
  REQUIRE(rec.chosen_ms > 0);
  REQUIRE((rec.chosen_rank == 0 || rec.chosen_ms < rec.heuristic_ms * (1.0 - fp8t::gemm::kAutotuneMargin)));
  // FP32 output of exact FP8 products without fast accumulation: 2^-10, as the untuned engine
  // test allows (every candidate accumulates in FP32 with periodic promotion).
  REQUIRE(rel_frobenius(got, ref) <= std::ldexp(1.0, -10));
  // The same problem again: the cached plan, no new timing.
  fp8t::gemm::fp8_gemm(a, fp8t::fp8::Format::kE4M3, one, b, fp8t::fp8::Format::kE4M3, one, at::Tensor(), at::kFloat,
                       false, "autotune test");
  REQUIRE(tuned_plans() == before + 1);

  // BF16 with bias, a transposed view: tuned too; FP32 output of exact BF16 products -> 1e-5.
  at::manual_seed(5);
  const at::Tensor x = at::randn({m, k}, on_cuda(at::kBFloat16));
  const at::Tensor w = at::randn({k, n}, on_cuda(at::kBFloat16)).t();  // [n, k] as a transposed view
  const at::Tensor bias = at::randn({n}, on_cuda(at::kFloat));
  const at::Tensor y = fp8t::gemm::bf16_gemm(x, w, bias, at::kFloat, "autotune test");
  REQUIRE(tuned_plans() == before + 2);
  const at::Tensor yref = at::mm(x.to(at::kDouble), w.to(at::kDouble).t()) + bias.to(at::kDouble);
  REQUIRE(rel_frobenius(y, yref) <= 1e-5);
}

TEST_CASE("gemm autotune: accumulating GEMMs and plans made during CUDA-graph capture are not timed",
          "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const AutotuneOn on;
  const int64_t m = 200, k = 96, n = 136;
  at::manual_seed(9);
  const at::Tensor a = at::randn({m, k}, on_cuda(at::kBFloat16)), b = at::randn({n, k}, on_cuda(at::kBFloat16));
  const at::Tensor start = at::randn({m, n}, on_cuda(at::kFloat));
  const at::Tensor ref = start.to(at::kDouble) + at::mm(a.to(at::kDouble), b.to(at::kDouble).t());
  // Accumulating first: timing would lose out's contents, so the heuristic's choice is kept.
  at::Tensor out = start.clone();
  const size_t before = tuned_plans();
  fp8t::gemm::bf16_gemm_accumulate(a, b, out, "autotune test");
  REQUIRE(tuned_plans() == before);
  REQUIRE(rel_frobenius(out, ref) <= 1e-5);  // FP32: exact BF16 products summed in FP32

  // A new problem first met during capture: no timing (nothing may synchronize), replay works.
  const at::Tensor a2 = at::randn({m + 8, k}, on_cuda(at::kBFloat16));
  at::Tensor y;
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    graph.capture_begin();
    y = fp8t::gemm::bf16_gemm(a2, b, at::Tensor(), at::kFloat, "autotune capture test");
    graph.capture_end();
  }
  REQUIRE(tuned_plans() == before);
  graph.replay();
  side.synchronize();
  REQUIRE(rel_frobenius(y, at::mm(a2.to(at::kDouble), b.to(at::kDouble).t())) <= 1e-5);
}

TEST_CASE("gemm autotune timing: the LLaMA-1B step's FP8 GEMMs and the head's BF16 GEMMs (runs with FP8T_TEST_REPORT)",
          "[gemm][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  if (!reporting()) SKIP("set FP8T_TEST_REPORT=1 to time the LLaMA-1B GEMMs' candidates");
  const AutotuneOn on;
  const int64_t tokens = 16384, d = 2048, vocab = 128256, head_rows = 1024;
  struct Linear {
    const char* name;
    int64_t in, out;
  };
  // The Linears of one LLaMA-1B layer (q|k|v fused, o, gate|up fused, down), B8 T2048.
  const std::vector<Linear> linears = {{"qkv", d, 3072}, {"o", d, d}, {"gate_up", d, 16384}, {"down", 8192, d}};
  const at::Tensor one = at::ones({}, on_cuda(at::kFloat));
  using fp8t::fp8::Format;
  double heuristic_total = 0, chosen_total = 0;
  auto take = [&](const char* what, double weight) {
    const fp8t::gemm::TuneRecord r = GemmEngine::instance().tuning_log().back();
    std::printf("  %-8s %-62s heuristic %.4f ms, chosen #%d of %d %.4f ms (%.1f%%)\n", what, r.problem.c_str(),
                r.heuristic_ms, r.chosen_rank + 1, r.candidates, r.chosen_ms,
                100.0 * (r.chosen_ms / r.heuristic_ms - 1.0));
    REQUIRE((r.chosen_rank == 0 || r.chosen_ms < r.heuristic_ms * (1.0 - fp8t::gemm::kAutotuneMargin)));
    heuristic_total += weight * r.heuristic_ms;
    chosen_total += weight * r.chosen_ms;
  };
  std::printf("gemm autotune, LLaMA-1B B8 T2048 (per GEMM; totals weighted by 16 layers and 16 head chunks):\n");
  for (const Linear& l : linears) {
    const at::Tensor x = gpu_codes(tokens, l.in, at::kFloat8_e4m3fn, 1.0, 11);
    const at::Tensor w = gpu_codes(l.out, l.in, at::kFloat8_e4m3fn, 1.0, 12);
    const at::Tensor dy = gpu_codes(tokens, l.out, at::kFloat8_e5m2, 1.0, 13);
    const size_t before = tuned_plans();
    fp8t::gemm::fp8_gemm(x, Format::kE4M3, one, w, Format::kE4M3, one, at::Tensor(), at::kBFloat16, true, "fprop");
    if (tuned_plans() > before) take(l.name, 16);
    const size_t b2 = tuned_plans();
    fp8t::gemm::fp8_gemm(dy, Format::kE5M2, one, w.t().contiguous(), Format::kE4M3, one, at::Tensor(), at::kBFloat16,
                         false, "dgrad");
    if (tuned_plans() > b2) take(l.name, 16);
    const size_t b3 = tuned_plans();
    fp8t::gemm::fp8_gemm(dy.t().contiguous(), Format::kE5M2, one, x.t().contiguous(), Format::kE4M3, one,
                         at::Tensor(), at::kFloat, false, "wgrad");
    if (tuned_plans() > b3) take(l.name, 16);
  }
  // The head's GEMMs on one chunk, as lib/ops/linear_cross_entropy runs them through the engine.
  at::manual_seed(14);
  const at::Tensor xh = at::randn({head_rows, d}, on_cuda(at::kBFloat16));
  const at::Tensor wh = at::randn({vocab, d}, on_cuda(at::kBFloat16)) * 0.02;
  const at::Tensor g = at::randn({head_rows, vocab}, on_cuda(at::kBFloat16)) * 1e-4;
  size_t bh = tuned_plans();
  fp8t::gemm::bf16_gemm(xh, wh, at::Tensor(), at::kBFloat16, "head logits");
  if (tuned_plans() > bh) take("head", 16);
  bh = tuned_plans();
  fp8t::gemm::bf16_gemm(g, wh.t(), at::Tensor(), at::kBFloat16, "head dgrad");
  if (tuned_plans() > bh) take("head", 16);
  bh = tuned_plans();
  fp8t::gemm::bf16_gemm(g.t(), xh.t(), at::Tensor(), at::kFloat, "head wgrad");
  if (tuned_plans() > bh) take("head", 16);
  std::printf("  weighted total: heuristic %.2f ms, chosen %.2f ms (%.1f%%)\n", heuristic_total, chosen_total,
              100.0 * (chosen_total / heuristic_total - 1.0));
}

#endif  // FP8T_WITH_CUDA
