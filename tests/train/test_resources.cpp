#include "lib/train/resources.h"

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

TEST_CASE("resources: the estimate counts parameters, state and activations", "[train]") {
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

TEST_CASE("resources: impossible sizes are refused naming the key and the estimate", "[train]") {
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
