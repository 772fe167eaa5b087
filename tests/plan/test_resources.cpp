#include "lib/plan/resources.h"

#include <algorithm>  // std::min
#include <cstdlib>    // setenv, unsetenv

#include "lib/config/loader.h"  // config::load_from_string
#include "lib/step/session.h"  // Session (the out-of-memory hook)
#include "lib/util/error.h"
#include "tests/catch.h"

using namespace fp8t;
using fp8t::plan::check_memory_fits;
using fp8t::plan::estimate_training_memory;

namespace {

std::string refusal(const ExperimentConfig& cfg, double capacity) {
  try {
    check_memory_fits(cfg, capacity, "cpu");
  } catch (const Error& e) {
    REQUIRE(e.code() == ExitCode::kBadInput);
    return e.what();
  }
  FAIL("no refusal");
  return "";
}

}  // namespace

TEST_CASE("resources: the estimate counts parameters, state and activations", "[plan]") {
  ExperimentConfig c;  // the defaults: d 128, 2 layers, ff 512, vocab 64, 16 x 64 tokens, fp32
  const auto e = estimate_training_memory(c);
  // 2 * 64 * 128 (embedding + head) + 2 * (4 * 128^2 + 2 * 128 * 512) exactly.
  CHECK(e.parameters == 2.0 * 64 * 128 + 2.0 * (4.0 * 128 * 128 + 2.0 * 128 * 512));
  CHECK(e.state_bytes == 16.0 * e.parameters);
  CHECK(e.activation_bytes == 16.0 * 64 * (2.0 * (3 * 128 + 2 * 512) + 64) * 4);
  CHECK(e.total_bytes() < 64.0 * 1024 * 1024);  // the default config is tiny
  // Grouped-query attention: k and v have n_kv_head * head_dim = 1 * 32 rows each.
  c.model.n_kv_head = 1;
  CHECK(estimate_training_memory(c).parameters ==
        2.0 * 64 * 128 + 2.0 * (2.0 * 128 * 128 + 2.0 * 128 * 32 + 2.0 * 128 * 512));
  REQUIRE_NOTHROW(check_memory_fits(c, 1024.0 * 1024 * 1024, "cpu"));
}

TEST_CASE("resources: impossible sizes are refused naming the key and the estimate", "[plan]") {
  const double ram = 64.0 * 1024 * 1024 * 1024;
  ExperimentConfig batch;
  batch.train.micro_batch_size = 1000000000000;
  const std::string a = refusal(batch, ram);
  CHECK_THAT(a, FP8T_CONTAINS("train.micro_batch_size=1000000000000"));
  CHECK_THAT(a, FP8T_CONTAINS("GiB"));
  CHECK_THAT(a, FP8T_CONTAINS("has 64 GiB"));

  ExperimentConfig wide;
  wide.model.d_model = 1000000;
  CHECK_THAT(refusal(wide, ram), FP8T_CONTAINS("model.d_model=1000000"));

  ExperimentConfig deep;
  deep.model.n_layer = 100000;
  CHECK_THAT(refusal(deep, ram), FP8T_CONTAINS("model.n_layer=100000"));
}

TEST_CASE("resources: bytes per parameter by category; ZeRO-1 divides the AdamW moments and the gradients",
          "[plan]") {
  ExperimentConfig c;
  c.train.grad_accum_steps = 1;
  const auto ddp = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2));
  CHECK(ddp.state_bytes_per_param() == 16.0);  // fp32, dist.zero 0: 4 + 4 + 8
  CHECK(ddp.gradient_bucket_bytes == 0.0);
  c.dist.zero = ZeroStage::kOptimizer;
  const auto zero = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2));
  CHECK(zero.optimizer_bytes_per_param == 4.0);
  CHECK(zero.grad_bytes_per_param == 2.0);
  // Plus the full buckets in use at once: three of dist.bucket_mb (or all, if smaller).
  const double buckets = std::min(4.0 * zero.parameters, 3.0 * c.dist.bucket_mb * 1024 * 1024);
  CHECK(zero.gradient_bucket_bytes == buckets);
  CHECK(zero.state_bytes == 10.0 * zero.parameters + buckets);  // 4 + 4 / 2 + 8 / 2
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 8)).state_bytes_per_param() == 5.5);
  // With accumulation the full buckets persist over the micro-batches: 4 bytes/parameter in all
  // (2 of them counted as the shard).
  c.train.grad_accum_steps = 2;
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2)).gradient_bucket_bytes == 2.0 * zero.parameters);
  c.train.grad_accum_steps = 1;
  c.precision = Precision::kFp8;
  const auto fp8 = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2));
  // 2 bytes per FP8 (block) weight, averaged over all parameters: below 2, above 0.
  CHECK(fp8.fp8_bytes_per_param > 0.0);
  CHECK(fp8.fp8_bytes_per_param < 2.0);
  c.train.recompute = Recompute::kBlock;
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2)).activation_bytes < fp8.activation_bytes);
}

TEST_CASE("resources: bf16 and fp8 count one chunk of the logits, fp32 and fp16 all of them", "[plan]") {
  ExperimentConfig c;  // d 128, 2 layers, ff 512
  c.model.vocab_size = 50304;
  c.model.seq_len = 2048;
  c.train.micro_batch_size = 8;
  const double blocks = 16384.0 * 2.0 * (3 * 128 + 2 * 512);
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    c.precision = p;
    // The chunked head (lib/ops/linear_cross_entropy.h): 5248 of the 16384 rows at a time.
    CHECK(estimate_training_memory(c).activation_bytes == (blocks + 5248.0 * 50304) * 2);
  }
  c.precision = Precision::kFp16;
  CHECK(estimate_training_memory(c).activation_bytes == (blocks + 16384.0 * 50304) * 2);
}

TEST_CASE("resources: an out-of-memory error names the estimate and the levers, exit 2", "[plan]") {
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  std::string message;
  try {
    fp8t::plan::throw_out_of_memory(c, ParallelLayout::of(c.dist, 0, 2), "building the model", "CUDA out of memory. Tried to allocate 2 GiB\nframe #0");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    message = e.what();
  }
  CHECK_THAT(message, FP8T_CONTAINS("out of memory while building the model: CUDA out of memory. Tried to allocate 2 GiB"));
  CHECK_THAT(message, FP8T_CONTAINS("weights 4 + gradients 4 + AdamW moments 8"));
  CHECK_THAT(message, FP8T_CONTAINS("FP8 weight copies"));
  CHECK_THAT(message, FP8T_CONTAINS("bytes/parameter"));
  CHECK_THAT(message, FP8T_CONTAINS("dist.zero 1"));
  CHECK_THAT(message, FP8T_CONTAINS("train.recompute block"));
  CHECK_THAT(message, FP8T_CONTAINS("train.micro_batch_size"));
  CHECK(message.find("frame #0") == std::string::npos);  // the allocator's first line only
}

TEST_CASE("resources: FP8TRAIN_TEST_OOM injects the out-of-memory error a Session turns into exit 2", "[plan]") {
  ExperimentConfig c;
  c.model.n_layer = 1;
  c.model.d_model = 32;
  c.model.n_head = 2;
  ::setenv("FP8TRAIN_TEST_OOM", "build", 1);
  std::string message;
  try {
    fp8t::step::Session session(c, at::Device(at::kCPU));
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    message = e.what();
  }
  ::unsetenv("FP8TRAIN_TEST_OOM");
  CHECK_THAT(message, FP8T_CONTAINS("out of memory while building the model"));
  CHECK_THAT(message, FP8T_CONTAINS("injected by FP8TRAIN_TEST_OOM=build"));
  CHECK_THAT(message, FP8T_CONTAINS("dist.zero"));
  REQUIRE_NOTHROW(fp8t::step::Session(c, at::Device(at::kCPU)));  // unset: nothing injected
}

namespace {

// d 128, 2 GELU blocks of ff 512 (kv = d), vocab 4096: each of the embedding and the head
// (4096 x 128 = 524288 parameters) is larger than a block (2 * 128^2 + 2 * 128 * 128 + 2 * 128 *
// 512 = 196608); 2 * 524288 + 2 * 196608 = 1441792 parameters in all.
ExperimentConfig zero3_config() {
  ExperimentConfig c;
  c.model.vocab_size = 4096;
  c.dist.zero = ZeroStage::kFull;
  return c;
}

}  // namespace

// The expected values follow the ZeRO-3 memory model of lib/plan/resources.h by hand: the units
// are [embedding 524288, block 196608, block 196608, head 524288] parameters.
TEST_CASE("resources: ZeRO-3 shards the state and counts the gathered units and two units' gradients", "[plan]") {
  ExperimentConfig c = zero3_config();
  const auto e = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));  // fp32, FP32 moments, prefetch 1, reshard after forward
  REQUIRE(e.parameters == 1441792.0);
  CHECK(e.shard_ranks == 4);
  CHECK(e.weight_bytes_per_param == 1.0);     // 4 / 4
  CHECK(e.grad_bytes_per_param == 1.0);       // 4 / 4
  CHECK(e.optimizer_bytes_per_param == 2.0);  // 8 / 4
  CHECK(e.fp8_bytes_per_param == 0.0);
  // Gradients of two units: the widest pair is the embedding (or the head) and a block,
  // 524288 + 196608 = 720896 parameters x 4 bytes.
  CHECK(e.gradient_bucket_bytes == 2883584.0);
  CHECK(e.state_bytes == 4.0 * 1441792 + 2883584.0);
  // The unit computing + dist.prefetch 1: the same pair, gathered in fp32 (4 bytes).
  CHECK(e.gathered_units == 2);
  CHECK(e.gathered_weight_bytes == 2883584.0);
  CHECK(e.head_gradient_bytes == 0.0);
  // Activations do not depend on the sharding: 1024 tokens x (2 x (3 x 128 + 2 x 512) + 4096 logits) x 4 bytes.
  CHECK(e.activation_bytes == (1024.0 * (2 * (3 * 128 + 2 * 512)) + 1024.0 * 4096) * 4);
  CHECK(e.total_bytes() == e.state_bytes + 2883584.0 + e.activation_bytes);

  c.dist.prefetch = 2;  // three units: the embedding and both blocks, 917504 parameters
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4)).gathered_weight_bytes == 917504.0 * 4);
  c.dist.prefetch = 3;  // four units: the whole model
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4)).gathered_weight_bytes == 1441792.0 * 4);
  c.dist.prefetch = 1;
  c.dist.reshard_after_forward = false;  // every unit stays gathered to its backward
  const auto kept = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));
  CHECK(kept.gathered_weight_bytes == 1441792.0 * 4);
  CHECK(kept.gathered_units == 4);
}

TEST_CASE("resources: ZeRO-3 gathers FP8 block weights in 1 byte plus their transpose, the rest in the compute dtype",
          "[plan]") {
  ExperimentConfig c = zero3_config();
  c.precision = Precision::kFp8;
  const auto fp8 = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));
  // Embedding 524288 x 2 (bf16) + a block 196608 x (1 + 1) = 1441792 bytes.
  CHECK(fp8.gathered_weight_bytes == 1441792.0);
  CHECK(fp8.fp8_bytes_per_param == 0.0);  // no persistent copies
  CHECK(fp8.head_gradient_bytes == 0.0);  // the head's gradient is one of the two units'
  CHECK(fp8.gradient_bucket_bytes == 2883584.0);
  c.precision = Precision::kBf16;  // 2 bytes everywhere: (524288 + 196608) x 2
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4)).gathered_weight_bytes == 1441792.0);
  c.dist.reduce_dtype = ReduceDtype::kBf16;  // + a 2-byte copy of the two units' gradients: 720896 x 6
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4)).gradient_bucket_bytes == 4325376.0);
}

TEST_CASE("resources: rowwise weights travel in the compute dtype under ZeRO-3, each layer keeping its FP8 copies",
          "[plan]") {
  // The rowwise recipe's WeightParts::fp8_gather is false: its FP8 Linears' weights are gathered as
  // the rest (bf16: 2 bytes, as the codes and their transpose are: the gathered bytes stay
  // 1441792), and each layer casts and caches its own E4M3 weight in both layouts, unsharded on
  // every rank: 2 bytes x the two blocks' 393216 parameters.
  ExperimentConfig c = zero3_config();
  c.precision = Precision::kFp8;
  c.fp8.kind = fp8::RecipeKind::kRowwise;
  const auto rowwise = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));
  CHECK(rowwise.gathered_weight_bytes == 1441792.0);
  CHECK(rowwise.fp8_bytes_per_param == 2.0 * 393216 / 1441792);
  c.fp8.kind = fp8::RecipeKind::kDelayed;
  const auto codes = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));
  // (bytes/parameter x parameters: equal up to the rounding of the division, 1e-12 relative)
  CHECK(rowwise.state_bytes == Approx(codes.state_bytes + 2.0 * 393216).epsilon(1e-12));
  // train.recompute casts drops the cached transpose where the recipe transposes codes (delayed,
  // under DDP: 1 copy), not under rowwise, whose cache keeps both layouts.
  c.train.recompute = Recompute::kCasts;
  c.dist.zero = ZeroStage::kNone;
  CHECK(estimate_training_memory(c).fp8_bytes_per_param == 1.0 * 393216 / 1441792);
  c.fp8.kind = fp8::RecipeKind::kRowwise;
  CHECK(estimate_training_memory(c).fp8_bytes_per_param == 2.0 * 393216 / 1441792);
}

TEST_CASE("resources: ZeRO-3 shards within dist.shard_group_size ranks; bf16 moments; a tied head", "[plan]") {
  ExperimentConfig c = zero3_config();
  c.dist.shard_group_size = 2;
  const auto group = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));
  CHECK(group.shard_ranks == 2);
  CHECK(group.state_bytes_per_param() == 8.0);  // (4 + 4 + 8) / 2
  c.dist.shard_group_size = 0;
  c.train.moments_dtype = MomentsDtype::kBf16;
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4)).state_bytes_per_param() == 3.0);  // (4 + 4 + 4) / 4
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 8)).state_bytes_per_param() == 1.5);  // (4 + 4 + 4) / 8
  // Tied: 524288 + 2 x 196608 = 917504 parameters; kept gathered, the shared matrix counts once.
  c.model.tie_embeddings = true;
  c.dist.reshard_after_forward = false;
  const auto tied = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 4));
  CHECK(tied.parameters == 917504.0);
  CHECK(tied.gathered_units == 3);
  CHECK(tied.gathered_weight_bytes == 917504.0 * 4);
  CHECK(tied.gradient_bucket_bytes == 720896.0 * 4);  // the head (the shared matrix) and the last block
}

TEST_CASE("resources: under DDP and ZeRO-1 the chunked head keeps its FP32 weight gradient from the forward",
          "[plan]") {
  ExperimentConfig c = zero3_config();
  c.dist.zero = ZeroStage::kNone;
  CHECK(estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2)).head_gradient_bytes == 0.0);  // fp32: the unfused head
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    c.precision = p;
    const auto e = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2));
    CHECK(e.head_gradient_bytes == 524288.0 * 4);  // vocab x d_model, FP32
    CHECK(e.total_bytes() == e.state_bytes + e.head_gradient_bytes + e.activation_bytes);
  }
  c.dist.zero = ZeroStage::kOptimizer;
  c.train.moments_dtype = MomentsDtype::kBf16;
  const std::string text = estimate_training_memory(c, ParallelLayout::of(c.dist, 0, 2)).breakdown(c);
  CHECK_THAT(text, FP8T_CONTAINS("AdamW moments 2 (4 / 2 ranks, dist.zero 1)"));  // bf16: 4 bytes, not 8
  CHECK_THAT(text, FP8T_CONTAINS("the chunked head's FP32 weight gradient"));
}

TEST_CASE("resources: the Llama 3 shapes count their published parameters", "[plan]") {
  // Llama 3 8B: 32 blocks of d 4096, 8 K/V heads of 128, SwiGLU 14336, vocab 128256, untied.
  const std::string llama = "model: {vocab_size: 128256, n_kv_head: 8, activation: swiglu, ";
  const auto shape = [&](const std::string& rest) {
    return fp8t::config::load_from_string(llama + rest + "}", "<test>").config;
  };
  // 2 x 128256 x 4096 + 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336): 8.03e9 without the norms.
  CHECK(estimate_training_memory(shape("n_layer: 32, d_model: 4096, d_ff: 14336, n_head: 32")).parameters == 8029995008.0);
  // 70B: 80 blocks of d 8192, 64 heads (of 128), SwiGLU 28672: 70.55e9.
  CHECK(estimate_training_memory(shape("n_layer: 80, d_model: 8192, d_ff: 28672, n_head: 64")).parameters ==
        70552387584.0);
}
