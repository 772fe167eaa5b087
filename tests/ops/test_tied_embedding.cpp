// lib/ops/tied_embedding.*: the embedding lookup whose backward takes the tied head's weight
// gradient from ops::linear_cross_entropy and adds its rows to it: the weight's gradient against
// autograd's sum of the two uses, gradient accumulation over two micro-batches, a head gradient
// that no embedding backward took (not added to a later one), and the lookup alone; on CUDA the
// same sum, the same bits run to run.
#include "lib/ops/tied_embedding.h"

#include <torch/torch.h>  // torch::autograd::grad

#include <memory>   // std::make_shared
#include <utility>  // std::pair

#include "lib/ops/linear_cross_entropy.h"  // ops::linear_cross_entropy
#include "lib/util/error.h"                // fp8t::Error
#include "tests/catch.h"
#if defined(FP8T_WITH_CUDA)
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU
#endif

namespace {

using fp8t::ops::linear_cross_entropy;
using fp8t::ops::tied_embedding;
using fp8t::ops::TiedGradient;

at::Tensor leaf(const at::Tensor& v) { return v.detach().clone().requires_grad_(true); }

double rel_norm(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).norm() / (w.norm() + 1e-30)).item<double>();
}

// A tied model in miniature: E [vocab, d] looked up for ids, a nonlinearity, E as the head.
struct Tiny {
  int64_t vocab = 29, d = 16;
  at::Tensor e0, ids, targets;
  explicit Tiny(uint64_t seed) {
    at::manual_seed(seed);
    e0 = at::randn({vocab, d}) * 0.5;
    ids = at::randint(0, vocab, {4, 9}, at::kLong);  // 36 tokens over 29 rows: repeated ids
    targets = at::randint(0, vocab, {4, 9}, at::kLong);
  }
  // The loss of one micro-batch on the leaf e; with `tied` the gradient hand-over, else autograd's sum.
  at::Tensor loss(const at::Tensor& e, const std::shared_ptr<TiedGradient>& tied) const {
    const at::Tensor x = tied ? tied_embedding(e, ids, tied) : at::embedding(e, ids);
    return linear_cross_entropy(at::tanh(x * 1.5), e, targets, /*chunk_rows=*/5, fp8t::ops::kLinearCrossEntropyChunkBytes,
                                tied);
  }
};

}  // namespace

TEST_CASE("tied_embedding: the lookup's values and, alone, at::embedding's gradient", "[ops]") {
  const Tiny m(3);
  at::Tensor a = leaf(m.e0), b = leaf(m.e0);
  const auto tied = std::make_shared<TiedGradient>();
  const at::Tensor ya = tied_embedding(a, m.ids, tied), yb = at::embedding(b, m.ids);
  REQUIRE(at::equal(ya, yb));
  const at::Tensor w = at::randn(ya.sizes());
  (ya * w).sum().backward();
  (yb * w).sum().backward();
  // No head stored a gradient: the rows are added to zeros, one token after the other, in token
  // order, as the dense embedding backward adds them on the CPU: the same bits.
  REQUIRE(at::equal(a.grad(), b.grad()));
  REQUIRE(tied->forwards == 1);
}

TEST_CASE("tied_embedding: the head's gradient handed over gives autograd's sum of both uses", "[ops]") {
  const Tiny m(5);
  at::Tensor with = leaf(m.e0), without = leaf(m.e0);
  const auto tied = std::make_shared<TiedGradient>();
  const at::Tensor lw = m.loss(with, tied), lo = m.loss(without, nullptr);
  REQUIRE(at::equal(lw, lo));  // the forward is unchanged
  (lw * 0.75).backward();
  (lo * 0.75).backward();
  REQUIRE(!tied->dw.defined());  // the embedding's backward took it
  REQUIRE(tied->stored_for == -1);
  // The same FP32 terms, added in another order (each token's row into the head's dW, instead of
  // the tokens' sum first): an ulp or so of some elements. Seen: 4.4e-8 norm-wise (4.1e-8 and
  // 5.0e-8 in the cases below); 2e-7 is under two ulps (2^-23 = 1.2e-7) of every element.
  const double err = rel_norm(with.grad(), without.grad());
  CAPTURE(err);
  CHECK(err <= 2e-7);
  // Both shares are in it: the head's alone is far from the sum.
  at::Tensor head_only = leaf(m.e0);
  linear_cross_entropy(at::tanh(at::embedding(m.e0, m.ids) * 1.5), head_only, m.targets, 5).mul(0.75).backward();
  CHECK(rel_norm(head_only.grad(), without.grad()) > 1e-2);
}

TEST_CASE("tied_embedding: two micro-batches accumulate, each head's gradient into its own embedding's", "[ops]") {
  const Tiny m(7), m2(8);
  Tiny second = m;
  second.ids = m2.ids;
  second.targets = m2.targets;
  at::Tensor with = leaf(m.e0), without = leaf(m.e0);
  const auto tied = std::make_shared<TiedGradient>();
  m.loss(with, tied).backward();
  second.loss(with, tied).backward();
  m.loss(without, nullptr).backward();
  second.loss(without, nullptr).backward();
  REQUIRE(tied->forwards == 2);
  CHECK(rel_norm(with.grad(), without.grad()) <= 2e-7);  // the rounding of the case above
}

TEST_CASE("tied_embedding: a head gradient no embedding backward took is not added to a later one", "[ops]") {
  const Tiny m(9);
  at::Tensor e = leaf(m.e0), ref = leaf(m.e0);
  const auto tied = std::make_shared<TiedGradient>();
  // A backward to the embedding's output only: the head stores dW, the embedding's backward never runs.
  at::Tensor x = tied_embedding(e, m.ids, tied);
  const at::Tensor loss = linear_cross_entropy(at::tanh(x * 1.5), e, m.targets, 5,
                                               fp8t::ops::kLinearCrossEntropyChunkBytes, tied);
  (void)torch::autograd::grad({loss}, {x});
  REQUIRE(tied->dw.defined());
  REQUIRE(!e.grad().defined());
  // The next micro-batch's embedding (a later forward) starts from its own head's dW only.
  m.loss(e, tied).backward();
  m.loss(ref, nullptr).backward();
  CHECK(rel_norm(e.grad(), ref.grad()) <= 2e-7);  // the rounding of the case above
}

TEST_CASE("tied_embedding: errors name what is wrong", "[ops]") {
  const at::Tensor e = at::randn({5, 3});
  const auto tied = std::make_shared<TiedGradient>();
  REQUIRE_THROWS_AS(tied_embedding(e, at::zeros({2}, at::kLong), nullptr), fp8t::Error);
  REQUIRE_THROWS_WITH(tied_embedding(e, at::zeros({2}), tied), FP8T_CONTAINS("integer"));
  REQUIRE_THROWS_WITH(tied_embedding(at::randn({5}), at::zeros({2}, at::kLong), tied), FP8T_CONTAINS("2-D"));
}

#if defined(FP8T_WITH_CUDA)
TEST_CASE("tied_embedding on CUDA: the hand-over gives autograd's sum, the same bits run to run", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  // A BF16 head (the chunked op's CUDA kernels and GEMMs) over 1024 tokens of a 500-row vocabulary:
  // many repeated ids per row of the weight.
  at::manual_seed(13);
  const at::Device cuda(at::kCUDA);
  const at::Tensor e0 = (at::randn({500, 64}) * 0.5).to(cuda);
  const at::Tensor ids = at::randint(0, 500, {8, 128}, at::kLong).to(cuda);
  const at::Tensor targets = at::randint(0, 500, {8, 128}, at::kLong).to(cuda);
  auto run = [&](bool hand_over) {
    at::Tensor e = leaf(e0);
    const auto tied = hand_over ? std::make_shared<TiedGradient>() : nullptr;
    const at::Tensor x = hand_over ? tied_embedding(e, ids, tied) : at::embedding(e, ids);
    linear_cross_entropy(at::tanh(x * 1.5).to(at::kBFloat16), e, targets, /*chunk_rows=*/300,
                         fp8t::ops::kLinearCrossEntropyChunkBytes, tied)
        .backward();
    return e.grad().cpu();
  };
  const at::Tensor handed = run(true), again = run(true), summed = run(false);
  REQUIRE(at::equal(handed, again));  // sorted-index accumulation: deterministic
  // The FP32 terms in another order: the CPU cases' bound (not yet run on a GPU when written).
  const double err = rel_norm(handed, summed);
  CAPTURE(err);
  CHECK(err <= 2e-7);
}
#endif

