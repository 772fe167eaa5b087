// lib/plan/resources.*: the attention scores [B, H, T, T] are counted where scaled_dot_product_
// attention materialises them (ATen's math path: on the CPU with model.dropout > 0), never on
// a GPU. Exact arithmetic (the estimate is a sum of products of small integers in double).
#include <string>  // std::string

#include "lib/plan/memory_plan.h"  // plan_memory, format_memory_plan
#include "lib/plan/resources.h"
#include "lib/util/error.h"
#include "tests/catch.h"

using namespace fp8t;
using namespace fp8t::plan;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The default config (d 128, 2 layers, 4 heads, fp32, micro-batch 16) with a 65536-token context.
ExperimentConfig long_context(double dropout) {
  ExperimentConfig c;
  c.model.seq_len = 65536;
  c.model.dropout = dropout;
  return c;
}

}  // namespace

TEST_CASE("attention scores: the CPU's math path (dropout) materialises them, fused kernels do not", "[plan]") {
  ExperimentConfig c;
  CHECK(attention_scores_on(c, "cpu") == AttentionScores::kFused);  // the CPU flash kernel
  c.model.dropout = 0.1;
  CHECK(attention_scores_on(c, "cpu") == AttentionScores::kMaterialised);
  c.model.n_kv_head = 2;  // grouped-query attention: the same
  CHECK(attention_scores_on(c, "cpu") == AttentionScores::kMaterialised);
  // A GPU (or a planned cluster of them) never counts them: its estimates stay as they were.
  CHECK(attention_scores_on(c, "cuda:0") == AttentionScores::kFused);
  CHECK(attention_scores_on(c, "80 GiB devices") == AttentionScores::kFused);
}

TEST_CASE("attention scores: (3 x layers + 1) x B x H x T^2 at the activation element size", "[plan]") {
  ExperimentConfig c;  // 2 layers, 4 heads, micro-batch 16, seq_len 64, fp32
  c.model.dropout = 0.1;
  const MemoryEstimate fused = estimate_training_memory(c);
  const MemoryEstimate math = estimate_training_memory(c, ParallelLayout::of(c.dist), AttentionScores::kMaterialised);
  CHECK(fused.attention_score_bytes == 0.0);
  CHECK(math.attention_score_bytes == (3.0 * 2 + 1) * 16 * 4 * 64.0 * 64 * 4);
  CHECK(math.total_bytes() == fused.total_bytes() + math.attention_score_bytes);
  c.precision = Precision::kBf16;  // 2-byte activations
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist), AttentionScores::kMaterialised).attention_score_bytes ==
        (3.0 * 2 + 1) * 16 * 4 * 64.0 * 64 * 2);
  CHECK(attention_score_bytes(c) == (3.0 * 2 + 1) * 16 * 4 * 64.0 * 64 * 2);
}

TEST_CASE("attention scores: seq_len 65536 with dropout is refused on the CPU before the run, naming the term",
          "[plan]") {
  const double capacity = 24.0 * kGiB;
  // Without dropout the CPU runs its flash kernel: no scores, and the lower bound fits in 24 GiB.
  REQUIRE_NOTHROW(check_memory_fits(long_context(0.0), capacity, "cpu"));
  // The same on a GPU with dropout: its fused kernels hold no scores.
  REQUIRE_NOTHROW(check_memory_fits(long_context(0.1), capacity, "cuda:0"));
  std::string message;
  try {
    check_memory_fits(long_context(0.1), capacity, "cpu");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    message = e.what();
  }
  // 7 x 16 x 4 x 65536^2 x 4 bytes = 7 TiB.
  CHECK_THAT(message, FP8T_CONTAINS("attention scores: 7.17e+03 GiB"));
  CHECK_THAT(message, FP8T_CONTAINS("model.dropout=0.1"));
  CHECK_THAT(message, FP8T_CONTAINS("model.seq_len=65536"));
  // The planner's table names the term too, and the estimate of a planned GPU cluster has none.
  const MemoryPlan cpu = plan_memory(long_context(0.1), {1, capacity, "cpu"});
  CHECK_THAT(format_memory_plan(cpu), FP8T_CONTAINS("attention scores (math path, model.dropout 0.1: 7 x [B, H, T, T])"));
  CHECK_FALSE(cpu.fits);
  const MemoryPlan gpu = plan_memory(long_context(0.1), {1, 80.0 * kGiB, "cuda:0"});
  CHECK(gpu.estimate.attention_score_bytes == 0.0);
}
