#include "lib/plan/resources.h"

#include <algorithm>  // std::min
#include <cstdlib>    // setenv, unsetenv

#include "lib/step/session.h"  // Session (the out-of-memory hook)
#include "lib/util/error.h"
#include "tests/catch.h"

using namespace fp8t;
using fp8t::train::check_memory_fits;
using fp8t::train::estimate_training_memory;

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
  const auto ddp = estimate_training_memory(c, 2);
  CHECK(ddp.state_bytes_per_param() == 16.0);  // fp32, dist.zero 0: 4 + 4 + 8
  CHECK(ddp.gradient_bucket_bytes == 0.0);
  c.dist.zero = 1;
  const auto zero = estimate_training_memory(c, 2);
  CHECK(zero.optimizer_bytes_per_param == 4.0);
  CHECK(zero.grad_bytes_per_param == 2.0);
  // Plus the full buckets in use at once: three of dist.bucket_mb (or all, if smaller).
  const double buckets = std::min(4.0 * zero.parameters, 3.0 * c.dist.bucket_mb * 1024 * 1024);
  CHECK(zero.gradient_bucket_bytes == buckets);
  CHECK(zero.state_bytes == 10.0 * zero.parameters + buckets);  // 4 + 4 / 2 + 8 / 2
  CHECK(estimate_training_memory(c, 8).state_bytes_per_param() == 5.5);
  // With accumulation the full buckets persist over the micro-batches: 4 bytes/parameter in all
  // (2 of them counted as the shard).
  c.train.grad_accum_steps = 2;
  CHECK(estimate_training_memory(c, 2).gradient_bucket_bytes == 2.0 * zero.parameters);
  c.train.grad_accum_steps = 1;
  c.precision = Precision::kFp8;
  const auto fp8 = estimate_training_memory(c, 2);
  // 2 bytes per FP8 (block) weight, averaged over all parameters: below 2, above 0.
  CHECK(fp8.fp8_bytes_per_param > 0.0);
  CHECK(fp8.fp8_bytes_per_param < 2.0);
  c.train.recompute = Recompute::kBlock;
  CHECK(estimate_training_memory(c, 2).activation_bytes < fp8.activation_bytes);
}

TEST_CASE("resources: bf16 and fp8 count one chunk of the logits, fp32 and fp16 all of them", "[plan]") {
  ExperimentConfig c;  // d 128, 2 layers, ff 512
  c.model.vocab_size = 50304;
  c.model.seq_len = 2048;
  c.train.micro_batch_size = 8;
  const double blocks = 16384.0 * 2.0 * (3 * 128 + 2 * 512);
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    c.precision = p;
    // The chunked head (lib/ops/linear_cross_entropy.h): 2560 of the 16384 rows at a time.
    CHECK(estimate_training_memory(c).activation_bytes == (blocks + 2560.0 * 50304) * 2);
  }
  c.precision = Precision::kFp16;
  CHECK(estimate_training_memory(c).activation_bytes == (blocks + 16384.0 * 50304) * 2);
}

TEST_CASE("resources: an out-of-memory error names the estimate and the levers, exit 2", "[plan]") {
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  std::string message;
  try {
    fp8t::train::throw_out_of_memory(c, 2, "building the model", "CUDA out of memory. Tried to allocate 2 GiB\nframe #0");
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
    fp8t::train::Session session(c, at::Device(at::kCPU));
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    message = e.what();
  }
  ::unsetenv("FP8TRAIN_TEST_OOM");
  CHECK_THAT(message, FP8T_CONTAINS("out of memory while building the model"));
  CHECK_THAT(message, FP8T_CONTAINS("injected by FP8TRAIN_TEST_OOM=build"));
  CHECK_THAT(message, FP8T_CONTAINS("dist.zero"));
  REQUIRE_NOTHROW(fp8t::train::Session(c, at::Device(at::kCPU)));  // unset: nothing injected
}
