// lib/ops/linear_cross_entropy.*: the chunked LM head + cross-entropy against the unchunked ATen
// composition (at::linear, then at::cross_entropy_loss / ops::cross_entropy): loss and the
// gradients of x and of the weight, chunk counts that do not divide the rows, a tied weight, the
// loss-only path; on CUDA (BF16) the same comparison, the peak memory against the unchunked head,
// a capture in a CUDA graph, and (timing) the LLaMA-1B head per chunk budget and its GEMMs. One
// file for both sources: linear_cross_entropy.cpp (the chunk loop) and linear_cross_entropy_cuda.cpp
// (its CUDA steps) are tested through the same op.
#include "lib/ops/linear_cross_entropy.h"

#include <torch/torch.h>  // torch::NoGradGuard, backward

#include <chrono>   // std::chrono::steady_clock
#include <cmath>    // std::fabs
#include <cstdio>   // std::printf
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/ops/cross_entropy.h"  // ops::cross_entropy (the unchunked CUDA loss)
#include "lib/util/error.h"         // fp8t::Error
#include "lib/util/torch_compat.h"  // compat::AutocastGuard
#include "tests/catch.h"
#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>          // getCurrentCUDAStream
#include <c10/cuda/CUDACachingAllocator.h>  // getDeviceStats
#include <cuda_runtime.h>                   // cudaEvent_t

#include "lib/gemm/gemm_engine.h"          // gemm::bf16_gemm, bf16_gemm_accumulate

#include "lib/step/step_graph.h"           // step::CapturedGraph
#include "lib/util/memory.h"               // reset_peak_memory, peak_memory_bytes
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, on_cuda
#endif

namespace {

using fp8t::ops::linear_cross_entropy;

struct Grads {
  at::Tensor loss, dx, dw;
};

// x [rows, d] N(0, 1), weight [vocab, d] N(0, 0.5^2) (logits of a few units, as a trained head's),
// targets in [0, vocab).
struct Problem {
  at::Tensor x, w, t;
};

Problem make_problem(int64_t rows, int64_t d, int64_t vocab, uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({rows, d}), at::randn({vocab, d}) * 0.5, at::randint(0, vocab, {rows}, at::kLong)};
}

at::Tensor leaf(const at::Tensor& v) { return v.detach().clone().requires_grad_(true); }

// The fused op, backward from loss * upstream (upstream != 1: the backward must use it).
Grads fused(const Problem& p, int64_t chunk, double upstream, at::ScalarType x_dtype = at::kFloat) {
  at::Tensor x = leaf(p.x.to(x_dtype)), w = leaf(p.w);
  const at::Tensor loss = linear_cross_entropy(x, w, p.t, chunk);
  (loss * upstream).backward();
  return {loss.detach(), x.grad(), w.grad()};
}

// Today's head: at::linear in x's dtype, then the loss (CPU: ATen's composition; CUDA: the fused
// kernels of ops::cross_entropy over the whole logits).
Grads unfused(const Problem& p, double upstream, at::ScalarType x_dtype = at::kFloat) {
  at::Tensor x = leaf(p.x.to(x_dtype)), w = leaf(p.w);
  const at::Tensor logits = at::linear(x, w.to(x_dtype));
  const at::Tensor loss = logits.is_cuda() ? fp8t::ops::cross_entropy(logits, p.t)
                                           : at::cross_entropy_loss(logits.to(at::kFloat), p.t);
  (loss * upstream).backward();
  return {loss.detach(), x.grad(), w.grad()};
}

// The magnitudes the gradients sum, for an error bound relative to them: |G| · |W| for dx and
// |G|ᵀ · |x| for dW, with G = (softmax - onehot) / rows in float64.
std::pair<at::Tensor, at::Tensor> magnitudes(const Problem& p, double upstream) {
  const at::Tensor x = p.x.to(at::kDouble).cpu(), w = p.w.to(at::kDouble).cpu(), t = p.t.cpu();
  at::Tensor g = at::softmax(at::mm(x, w.t()), 1);
  g.scatter_add_(1, t.unsqueeze(1), at::full({t.size(0), 1}, -1.0, g.options()));
  g = g.abs() * (upstream / static_cast<double>(x.size(0)));
  return {at::mm(g, w.abs()), at::mm(g.t(), x.abs())};
}

// max |got - want| / (rel * magnitude + tiny): <= 1 passes.
double worst_ratio(const at::Tensor& got, const at::Tensor& want, const at::Tensor& magnitude, double rel) {
  const at::Tensor diff = (got.to(at::kDouble).cpu() - want.to(at::kDouble).cpu()).abs();
  return (diff / (magnitude * rel + 1e-30)).max().item<double>();
}

double rel_norm(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble).cpu(), w = want.to(at::kDouble).cpu();
  return ((g - w).norm() / (w.norm() + 1e-30)).item<double>();
}

}  // namespace

TEST_CASE("linear_cross_entropy: the chunk rule", "[ops]") {
  using fp8t::ops::linear_cross_entropy_chunk_rows;
  // 1.3B at the default 512 MiB: 512 MiB / (50304 x 2 bytes) = 5336 rows, rounded down to 128s.
  CHECK(linear_cross_entropy_chunk_rows(16384, 50304, 2) == 5248);
  CHECK(linear_cross_entropy_chunk_rows(16384, 50304, 4) == 2560);
  CHECK(linear_cross_entropy_chunk_rows(37, 50, 4) == 37);             // all rows fit: one chunk
  const int64_t mib256 = int64_t{256} << 20;
  CHECK(linear_cross_entropy_chunk_rows(1000, 1 << 28, 2, mib256) == 1);  // a row above the budget: 1 row
  CHECK(linear_cross_entropy_chunk_rows(1000, (1 << 28) / 200, 2, mib256) == 100);  // under 128: not rounded
  CHECK(linear_cross_entropy_chunk_rows(0, 50, 4) == 1);
  // train.loss_chunk_mib sets the budget: LLaMA-1B (vocab 128256, BF16) at 256 MiB: 1046 rows,
  // 1024 after rounding; at 1 GiB: 4186, 4096; at 1 MiB: 4 rows (under 128: not rounded).
  CHECK(linear_cross_entropy_chunk_rows(16384, 128256, 2, int64_t{256} << 20) == 1024);
  CHECK(linear_cross_entropy_chunk_rows(16384, 128256, 2) == 2048);  // the default 512 MiB: 2093 rows
  CHECK(linear_cross_entropy_chunk_rows(16384, 128256, 2, int64_t{1024} << 20) == 4096);
  CHECK(linear_cross_entropy_chunk_rows(16384, 128256, 2, int64_t{1} << 20) == 4);
}

TEST_CASE("linear_cross_entropy on the CPU (FP32) matches the unchunked ATen composition", "[ops]") {
  const int64_t rows = 51, d = 24, vocab = 37;
  const Problem p = make_problem(rows, d, vocab, 3);
  const double upstream = 0.75;
  const Grads ref = unfused(p, upstream);
  const auto [mag_dx, mag_dw] = magnitudes(p, upstream);
  // 0: the chunk rule (one chunk here); 1, 7, 13: chunks that do not divide 51; 51 and 64: one.
  for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{13}, int64_t{51}, int64_t{64}}) {
    CAPTURE(chunk);
    const Grads g = fused(p, chunk, upstream);
    REQUIRE(g.loss.dim() == 0);
    REQUIRE(g.loss.scalar_type() == at::kFloat);
    REQUIRE(g.dx.sizes() == p.x.sizes());
    REQUIRE(g.dw.sizes() == p.w.sizes());
    REQUIRE(g.dw.scalar_type() == at::kFloat);
    // FP32 on both sides, the same formulas: the per-row losses differ by a few ulps (the GEMM of
    // a chunk may block differently; ATen's log_softmax vs cross_entropy_loss of the same values)
    // and the means sum in another order: 1e-6 relative (~16 ulps).
    CHECK(std::fabs(g.loss.item<double>() - ref.loss.item<double>()) <= 1e-6 * std::fabs(ref.loss.item<double>()));
    // Each gradient element is a sum of vocab (dx) or rows (dW) products whose terms carry a few
    // ulps of rounding each (softmax, the 1/rows scale, the upstream product, chunked sums): the
    // error stays below 1e-5 of the sum of the terms' magnitudes (~40 sums of 2^-24-relative
    // roundings, with room for the ATen side's own).
    CHECK(worst_ratio(g.dx, ref.dx, mag_dx, 1e-5) <= 1.0);
    CHECK(worst_ratio(g.dw, ref.dw, mag_dw, 1e-5) <= 1.0);
  }
}

TEST_CASE("linear_cross_entropy: a tied weight gets the sum of both uses' gradients", "[ops]") {
  // The embedding matrix E [vocab, d] is looked up for the input and is the head's weight.
  const int64_t batch = 4, seq = 9, d = 16, vocab = 29;
  at::manual_seed(11);
  const at::Tensor e0 = at::randn({vocab, d}) * 0.5;
  const at::Tensor idx = at::randint(0, vocab, {batch, seq}, at::kLong);
  const at::Tensor targets = at::randint(0, vocab, {batch, seq}, at::kLong);
  auto run = [&](bool chunked) {
    at::Tensor e = leaf(e0);
    const at::Tensor h = at::tanh(at::embedding(e, idx) * 1.5);  // [batch, seq, d]
    const at::Tensor loss = chunked ? linear_cross_entropy(h, e, targets, 5)
                                    : at::cross_entropy_loss(at::linear(h, e).reshape({-1, vocab}), targets.reshape({-1}));
    loss.backward();
    return std::pair<at::Tensor, at::Tensor>{loss.detach(), e.grad()};
  };
  const auto [loss_c, grad_c] = run(true);
  const auto [loss_u, grad_u] = run(false);
  CHECK(std::fabs(loss_c.item<double>() - loss_u.item<double>()) <= 1e-6 * std::fabs(loss_u.item<double>()));
  // Both uses contribute (the embedding's rows and the head's): the sum matches within FP32
  // rounding of the summed terms (norm-wise 1e-5, the bound of the FP32 case above).
  CHECK(rel_norm(grad_c, grad_u) <= 1e-5);
  // Without the embedding's share the gradient would differ far more than that.
  at::Tensor e = leaf(e0);
  linear_cross_entropy(at::tanh(at::embedding(e0, idx) * 1.5), e, targets, 5).backward();
  CHECK(rel_norm(e.grad(), grad_u) > 1e-2);
}

TEST_CASE("linear_cross_entropy: without gradients only the loss is computed, the same value", "[ops]") {
  const Problem p = make_problem(23, 8, 19, 5);
  const at::Tensor x = leaf(p.x), w = leaf(p.w);
  const at::Tensor with_grad = linear_cross_entropy(x, w, p.t, 6);
  REQUIRE(with_grad.requires_grad());
  at::Tensor no_grad;
  {
    const torch::NoGradGuard guard;
    no_grad = linear_cross_entropy(x, w, p.t, 6);
  }
  CHECK_FALSE(no_grad.requires_grad());
  CHECK(at::equal(no_grad, with_grad.detach()));  // the same chunks and ops
  const at::Tensor frozen = linear_cross_entropy(p.x, p.w, p.t, 6);  // nothing requires grad
  CHECK_FALSE(frozen.requires_grad());
  CHECK(at::equal(frozen, with_grad.detach()));
  // Only x requires grad (a frozen head): dx flows, the weight gets none.
  at::Tensor xs = leaf(p.x);
  linear_cross_entropy(xs, p.w, p.t, 6).backward();
  CHECK(xs.grad().defined());
}

TEST_CASE("linear_cross_entropy on the CPU under bf16 autocast follows the BF16 head", "[ops]") {
  const Problem p = make_problem(40, 32, 48, 8);
  const double upstream = 1.0;
  Grads g, ref;
  {
    const fp8t::compat::AutocastGuard autocast(c10::DeviceType::CPU, at::kBFloat16);
    g = fused(p, 9, upstream);  // FP32 x and weight: the GEMMs run in BF16
    at::Tensor x = leaf(p.x), w = leaf(p.w);
    const at::Tensor loss = at::cross_entropy_loss(at::linear(x, w).to(at::kFloat), p.t);  // BF16 linear
    loss.backward();
    ref = {loss.detach(), x.grad(), w.grad()};
  }
  REQUIRE(g.dx.scalar_type() == at::kFloat);  // x's own dtype
  // BF16 logits (8 significant bits) on both sides, rounded from FP32 sums of other orders: a
  // logit may land one BF16 ulp apart; 2^-8 relative on the loss. The gradients are BF16 products
  // of BF16-rounded gradients: norm-wise 1e-2.
  CHECK(std::fabs(g.loss.item<double>() - ref.loss.item<double>()) <= std::ldexp(1.0, -8) * ref.loss.item<double>());
  CHECK(rel_norm(g.dx, ref.dx) <= 1e-2);
  CHECK(rel_norm(g.dw, ref.dw) <= 1e-2);
}

TEST_CASE("linear_cross_entropy: errors name the shapes and dtypes", "[ops]") {
  const Problem p = make_problem(6, 4, 5, 1);
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, at::randn({5, 3}), p.t),
                    FP8T_CONTAINS("weight [vocab, d]") && FP8T_CONTAINS("[5, 3]"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, p.t.narrow(0, 0, 4)), FP8T_CONTAINS("needs 6 integer targets"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, p.t.to(at::kFloat)), FP8T_CONTAINS("integer targets"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, p.t, 0, 0), FP8T_CONTAINS("chunk_bytes must be positive"));
  const fp8t::compat::AutocastGuard autocast(c10::DeviceType::CPU, at::kHalf);
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, p.t), FP8T_CONTAINS("Half") && FP8T_CONTAINS("unfused"));
}

#if defined(FP8T_WITH_CUDA)

namespace {

Problem on_gpu(const Problem& p) { return {p.x.cuda(), p.w.cuda(), p.t.cuda()}; }

// One head + loss, forward and backward, timed: `loss_of(x, w)` on leaves copied from x0 and w0,
// once to warm up (GEMM plans, workspaces), then kSteps times; the mean time, the allocator's peak
// above the inputs, and the last loss.
struct HeadRun {
  double ms = 0;
  double peak_mib = 0;
  double loss = 0;
};

template <typename LossOf>
HeadRun time_head(const at::Tensor& x0, const at::Tensor& w0, LossOf&& loss_of) {
  const at::Device cuda(at::kCUDA);
  at::Tensor x = leaf(x0), w = leaf(w0);
  auto step = [&] {
    const at::Tensor loss = loss_of(x, w);
    loss.backward();
    x.mutable_grad().reset();
    w.mutable_grad().reset();
    return loss.detach();
  };
  (void)step();
  torch::cuda::synchronize();
  fp8t::release_cached_memory(cuda);
  const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  fp8t::reset_peak_memory(cuda);
  constexpr int kSteps = 5;
  at::Tensor loss;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSteps; ++i) loss = step();
  torch::cuda::synchronize();
  HeadRun r;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kSteps;
  r.peak_mib = static_cast<double>(fp8t::peak_memory_bytes(cuda) - before) / (1 << 20);
  r.loss = loss.item<double>();
  return r;
}

// Mean milliseconds of `gemm` over 10 calls after 2 (CUDA events on the current stream).
template <typename Gemm>
double gemm_ms(Gemm&& gemm) {
  for (int i = 0; i < 2; ++i) gemm();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t ev[2];
  for (auto& e : ev) cudaEventCreate(&e);
  cudaEventRecord(ev[0], stream);
  constexpr int kCalls = 10;
  for (int i = 0; i < kCalls; ++i) gemm();
  cudaEventRecord(ev[1], stream);
  cudaEventSynchronize(ev[1]);
  float ms = 0;
  cudaEventElapsedTime(&ms, ev[0], ev[1]);
  for (auto& e : ev) cudaEventDestroy(e);
  return static_cast<double>(ms) / kCalls;
}

}  // namespace

TEST_CASE("linear_cross_entropy on CUDA (BF16, FP32) matches the unchunked head", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  // 1000 rows: chunks of 300 leave 100; 0 = the chunk rule (one chunk at this size).
  const Problem p = on_gpu(make_problem(1000, 256, 5000, 21));
  const double upstream = 0.5;
  for (const at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
    const Grads ref = unfused(p, upstream, dt);
    for (const int64_t chunk : {int64_t{0}, int64_t{300}}) {
      CAPTURE(c10::toString(dt), chunk);
      const Grads g = fused(p, chunk, upstream, dt);
      REQUIRE(g.dx.scalar_type() == dt);
      REQUIRE(g.dw.scalar_type() == at::kFloat);
      const double dl = std::fabs(g.loss.item<double>() - ref.loss.item<double>()) / ref.loss.item<double>();
      const double ex = rel_norm(g.dx, ref.dx), ew = rel_norm(g.dw, ref.dw);
      std::printf("linear_cross_entropy CUDA %s chunk %ld: loss rel %.2e, dx rel %.2e, dW rel %.2e\n",
                  c10::toString(dt), static_cast<long>(chunk), dl, ex, ew);
      // FP32: the same GEMMs and kernels up to summation order (1e-5 / 1e-4). BF16: logits of 8
      // significant bits from other GEMM kernels may land one ulp apart (2^-8 relative on the
      // loss); the unfused head rounds dW to BF16 once, this op sums FP32 products: norm-wise 1e-2.
      const bool bf16 = dt == at::kBFloat16;
      CHECK(dl <= (bf16 ? std::ldexp(1.0, -8) : 1e-5));
      CHECK(ex <= (bf16 ? 1e-2 : 1e-4));
      CHECK(ew <= (bf16 ? 1e-2 : 1e-4));
    }
  }
}

TEST_CASE("linear_cross_entropy on CUDA keeps less memory than the unchunked head", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Device cuda(at::kCUDA);
  // Logits dominate: 16384 x 32768 BF16 = 1 GiB whole; at a 256 MiB budget the chunk rule gives 4
  // chunks of 256 MiB (at the default 512 MiB, 2 chunks: 568 MiB seen, just above half of the
  // unchunked 1096 MiB, so this test names its budget).
  const Problem p = on_gpu(make_problem(16384, 256, 32768, 4));
  auto peak_above_inputs = [&](auto&& body) {
    torch::cuda::synchronize();
    fp8t::release_cached_memory(cuda);
    at::Tensor x = leaf(p.x.to(at::kBFloat16)), w = leaf(p.w);
    torch::cuda::synchronize();
    const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
    fp8t::reset_peak_memory(cuda);
    body(x, w);
    torch::cuda::synchronize();
    return fp8t::peak_memory_bytes(cuda) - before;
  };
  auto fused_step = [&](at::Tensor& x, at::Tensor& w) {
    linear_cross_entropy(x, w, p.t, /*chunk_rows=*/0, int64_t{256} << 20).backward();
  };
  (void)peak_above_inputs(fused_step);  // once first: the GEMM workspaces are allocated once and kept
  const int64_t fused_peak = peak_above_inputs(fused_step);
  const int64_t unfused_peak = peak_above_inputs([&](at::Tensor& x, at::Tensor& w) {
    // The training step's head today: the loss's backward overwrites the logits.
    fp8t::ops::cross_entropy(at::linear(x, w.to(at::kBFloat16)), p.t, fp8t::ops::LogitsAfterBackward::kOverwriteLogits)
        .backward();
  });
  std::printf("linear_cross_entropy peak above the inputs: fused %.1f MiB, unchunked %.1f MiB\n",
              static_cast<double>(fused_peak) / (1 << 20), static_cast<double>(unfused_peak) / (1 << 20));
  // Unchunked: 1 GiB of logits + the head's backward (about 1.1 GiB). Fused: one 256 MiB chunk, the
  // BF16 weight copy (16 MiB), dW (32 MiB, accumulated in the GEMM), dx (8 MiB): about 0.3 GiB.
  CHECK(fused_peak < unfused_peak / 2);
}

TEST_CASE("linear_cross_entropy on CUDA at the 1.3B's head: time and peak against the unchunked head", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  // B8 T2048 tokens, d 2048, vocab 50304 (4 chunks of 5248 rows at the default 512 MiB).
  at::manual_seed(13);
  const at::Tensor x0 = (at::randn({16384, 2048}, fp8t::test::on_cuda(at::kFloat))).to(at::kBFloat16);
  const at::Tensor w0 = at::randn({50304, 2048}, fp8t::test::on_cuda(at::kFloat)) * 0.02;
  const at::Tensor t = at::randint(0, 50304, {16384}, fp8t::test::on_cuda(at::kLong));
  const HeadRun fused = time_head(x0, w0, [&](at::Tensor& x, at::Tensor& w) {
    return linear_cross_entropy(x, w, t);
  });
  const HeadRun unfused = time_head(x0, w0, [&](at::Tensor& x, at::Tensor& w) {
    return fp8t::ops::cross_entropy(at::linear(x, w.to(at::kBFloat16)), t,
                                    fp8t::ops::LogitsAfterBackward::kOverwriteLogits);
  });
  std::printf("1.3B head + loss, forward + backward: chunked %.2f ms, peak %.0f MiB above x and W; unchunked "
              "%.2f ms, %.0f MiB\n", fused.ms, fused.peak_mib, unfused.ms, unfused.peak_mib);
  // Unchunked: the 1.53 GiB logits, the head's BF16 weight copy, dW in BF16 and FP32 (2423 MiB seen
  // in GPU run 5). Chunked: one 503.5 MiB chunk, the weight copy (196 MiB), dW (393 MiB, FP32,
  // accumulated in the GEMM), dx (64 MiB): about 1.13 GiB (at 256 MiB chunks, 1295 MiB was seen
  // while each chunk's product was a 393 MiB temporary added to dW).
  CHECK(fused.peak_mib < unfused.peak_mib - 512.0);
}

TEST_CASE("linear_cross_entropy timing: the LLaMA-1B head per train.loss_chunk_mib, and its three GEMMs "
          "(runs with FP8T_TEST_REPORT)", "[ops][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  if (!fp8t::test::reporting()) SKIP("set FP8T_TEST_REPORT=1 to time the LLaMA-1B head");
  // B8 T2048 tokens, d 2048, vocab 128256 (the tied Llama 3 head): 2048 rows per chunk at the
  // default 512 MiB, 8 chunks.
  constexpr int64_t kRows = 16384, kD = 2048, kVocab = 128256;
  at::manual_seed(17);
  const at::Tensor x0 = at::randn({kRows, kD}, fp8t::test::on_cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor w0 = at::randn({kVocab, kD}, fp8t::test::on_cuda(at::kFloat)) * 0.02;
  const at::Tensor t = at::randint(0, kVocab, {kRows}, fp8t::test::on_cuda(at::kLong));
  const double head_tflop = 6.0 * kRows * kD * kVocab / 1e12;
  std::vector<HeadRun> runs;
  const std::vector<int64_t> budgets_mib = {128, 256, 512, 1024, 2048};
  for (const int64_t mib : budgets_mib) {
    runs.push_back(time_head(x0, w0, [&](at::Tensor& x, at::Tensor& w) {
      return linear_cross_entropy(x, w, t, /*chunk_rows=*/0, mib << 20);
    }));
    const HeadRun& r = runs.back();
    std::printf("LLaMA-1B head + loss, loss_chunk_mib %lld (%lld rows per chunk): %.2f ms (%.0f TFLOP/s), peak %.0f "
                "MiB above x and W, loss %.6f\n",
                static_cast<long long>(mib),
                static_cast<long long>(fp8t::ops::linear_cross_entropy_chunk_rows(kRows, kVocab, 2, mib << 20)),
                r.ms, head_tflop / (r.ms * 1e-3), r.peak_mib, r.loss);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    CAPTURE(budgets_mib[i]);
    // Each doubling doubles the one chunk of logits kept (128 MiB at the smallest budget).
    CHECK(runs[i].peak_mib > runs[i - 1].peak_mib + 0.9 * static_cast<double>(budgets_mib[i - 1]));
    // The same rows and GEMMs in other chunks: a logit may round one BF16 ulp apart (2^-8
    // relative; the logits here have std 0.9) where another kernel runs, which moves a row's loss
    // (lse minus the target's logit) by at most about 2 x 2^-8 x 1.5 = 0.012, of either sign; the
    // mean of 16384 rows by about 0.012 / sqrt(16384) = 9e-5, 8e-6 of the mean loss (about 12.2).
    // Tolerance 3e-5 relative: about 4 of those; the call of 2026-12-03 saw the same loss to the
    // 6 decimals printed at every budget.
    CHECK(std::fabs(runs[i].loss - runs[0].loss) <= 3e-5 * std::fabs(runs[0].loss));
  }

  // The three GEMMs of one chunk, each alone, as the op runs them (at::mm for the logits and dx,
  // lib/gemm's BF16 GEMM accumulating dW in FP32) and dx through lib/gemm instead.
  const at::Tensor w = w0.to(at::kBFloat16);
  at::Tensor dw = at::zeros({kVocab, kD}, fp8t::test::on_cuda(at::kFloat));
  for (const int64_t rows : {int64_t{1024}, int64_t{4096}}) {
    const at::Tensor xc = x0.narrow(0, 0, rows);
    at::Tensor logits = at::empty({rows, kVocab}, fp8t::test::on_cuda(at::kBFloat16));
    at::Tensor dx = at::empty({rows, kD}, fp8t::test::on_cuda(at::kBFloat16));
    const double tflop = 2.0 * rows * kD * kVocab / 1e12;
    const double fwd = gemm_ms([&] { at::mm_out(logits, xc, w.t()); });
    logits.mul_(1e-3);  // gradient-sized values
    const double dgrad = gemm_ms([&] { at::mm_out(dx, logits, w); });
    const at::Tensor dx_mm = dx.clone();
    at::Tensor dx_lt;
    const double dgrad_lt = gemm_ms([&] { dx_lt = fp8t::gemm::bf16_gemm(logits, w.t(), at::Tensor(), at::kBFloat16, "dx"); });
    const double wgrad = gemm_ms([&] { fp8t::gemm::bf16_gemm_accumulate(logits.t(), xc.t(), dw, "head wgrad"); });
    std::printf("LLaMA-1B head GEMMs, chunk of %lld rows (%.3f TFLOP each): logits %.3f ms (%.0f TFLOP/s), dx at::mm "
                "%.3f ms (%.0f), dx lib/gemm %.3f ms (%.0f), dW += lib/gemm FP32 %.3f ms (%.0f)\n",
                static_cast<long long>(rows), tflop, fwd, tflop / (fwd * 1e-3), dgrad, tflop / (dgrad * 1e-3),
                dgrad_lt, tflop / (dgrad_lt * 1e-3), wgrad, tflop / (wgrad * 1e-3));
    // Both dx GEMMs sum FP32 products of the same BF16 operands and round once to BF16; only the
    // order of the sums differs: a relative norm within two BF16 ulps (2^-7).
    CHECK(rel_norm(dx_lt, dx_mm) <= std::ldexp(1.0, -7));
  }
}

TEST_CASE("linear_cross_entropy on CUDA replays in a CUDA graph with the eager results", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Device cuda(at::kCUDA);
  const Problem p = on_gpu(make_problem(700, 128, 3000, 6));
  at::Tensor x = leaf(p.x.to(at::kBFloat16)), w = leaf(p.w);
  (linear_cross_entropy(x, w, p.t, 256) * 0.25).backward();  // eager (warm-up and reference)
  const at::Tensor eager_dx = x.grad().clone(), eager_dw = w.grad().clone();
  at::Tensor graph_loss;
  const auto graph = fp8t::step::CapturedGraph::capture(
      [&] {
        graph_loss = linear_cross_entropy(x, w, p.t, 256);
        (graph_loss * 0.25).backward();
      },
      cuda);
  x.grad().zero_();  // the captured backward accumulates into the existing .grad tensors
  w.grad().zero_();
  graph->replay();
  torch::cuda::synchronize();
  const at::Tensor eager_loss = linear_cross_entropy(x, w, p.t, 256).detach();
  // The same kernels on the same inputs: bit for bit.
  CHECK(at::equal(graph_loss, eager_loss));
  CHECK(at::equal(x.grad(), eager_dx));
  CHECK(at::equal(w.grad(), eager_dw));
}

#endif
