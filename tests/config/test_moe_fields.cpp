// lib/config/moe_fields.*: the moe section's keys load from files and flags, and its rules refuse,
// naming the key, what a mixture of experts cannot run.
#include "lib/config/moe_fields.h"

#include <string>  // std::string

#include "lib/config/loader.h"  // config::load_from_string, Override
#include "lib/util/error.h"     // fp8t::Error
#include "tests/catch.h"

using namespace fp8t;

namespace {

const char* kMoe = "model:\n  n_layer: 2\nmoe:\n  experts: 8\n  top_k: 2\n  d_ff: 64\n";

std::string refusal(const std::string& yaml, const std::vector<config::Override>& flags = {}) {
  try {
    config::load_from_string(yaml, "t.yaml", flags);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    return e.what();
  }
  FAIL("no refusal");
  return "";
}

}  // namespace

TEST_CASE("moe keys: read from the moe section and from --set", "[config]") {
  const auto loaded = config::load_from_string(kMoe, "t.yaml", {{"moe.score", "sigmoid", "--set"}});
  const MoeSection& m = loaded.config.model.moe;
  CHECK(m.experts == 8);
  CHECK(m.top_k == 2);
  CHECK(loaded.config.model.expert_ff_dim() == 64);
  CHECK(m.score == RouterScore::kSigmoid);
  CHECK(std::string(config::to_string(m.balance)) == "aux_loss");
  ExperimentConfig dense;
  CHECK(dense.model.expert_ff_dim() == dense.model.ff_dim());  // moe.d_ff 0: model.d_ff
}

TEST_CASE("moe keys: the rules name the key", "[config]") {
  CHECK_THAT(refusal(kMoe, {{"moe.top_k", "9", "--set"}}), FP8T_CONTAINS("moe.top_k (--set): 9 is more than moe.experts"));
  CHECK_THAT(refusal(kMoe, {{"moe.first_k_dense", "2", "--set"}}), FP8T_CONTAINS("moe.first_k_dense (--set): 2 leaves none"));
  CHECK_THAT(refusal(kMoe, {{"dist.expert_parallel", "3", "--set"}}),
             FP8T_CONTAINS("dist.expert_parallel (--set): 3 does not divide moe.experts"));
  CHECK_THAT(refusal(kMoe, {{"moe.experts", "1024", "--set"}}), FP8T_CONTAINS("moe.experts"));  // the kernel's group limit
}

TEST_CASE("moe keys: a dense model refuses moe keys set by a flag or to another value, not a file's defaults", "[config]") {
  CHECK_THAT(refusal("", {{"moe.top_k", "4", "--set"}}), FP8T_CONTAINS("moe.top_k (--set) has no effect while moe.experts is 0"));
  CHECK_THAT(refusal("moe:\n  d_ff: 64\n"), FP8T_CONTAINS("moe.d_ff (t.yaml:2) has no effect"));
  CHECK_THAT(refusal("", {{"dist.expert_parallel", "2", "--set"}}), FP8T_CONTAINS("dist.expert_parallel"));
  // A file that spells out the defaults (as configs/default.yaml does) loads.
  CHECK_NOTHROW(config::load_from_string("moe:\n  experts: 0\n  top_k: 2\n  score: softmax\n", "t.yaml", {}));
}
