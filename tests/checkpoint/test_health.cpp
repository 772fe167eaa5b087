// lib/checkpoint/health.*: a checkpoint is judged by the step trained from its weights
// (finite, loss <= 3 x and gradient norm <= 10 x the medians of the recent healthy steps), and
// the way back after a divergence is the newest checkpoint not known to be unhealthy. No
// LibTorch: samples are plain numbers, the comparisons exact.
#include "lib/checkpoint/health.h"

#include <cmath>    // NAN
#include <fstream>  // std::ofstream
#include <string>   // std::string

#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::test::TempDir;
using namespace fp8t::checkpoint;

namespace {

StepSample sample(int64_t step, double loss, double grad_norm, bool applied = true) {
  return {step, loss, grad_norm, applied};
}

// Three healthy references: loss median 2.0, gradient-norm median 0.5.
HealthRule warmed_up() {
  HealthRule rule;
  rule.observe(sample(1, 2.2, 0.6));
  rule.observe(sample(2, 2.0, 0.5));
  rule.observe(sample(3, 1.8, 0.4));
  return rule;
}

}  // namespace

TEST_CASE("checkpoint health: a skipped or non-finite step is unhealthy", "[checkpoint]") {
  HealthRule rule;
  std::string why;
  CHECK_FALSE(rule.judge(sample(4, 2.0, 0.5, /*applied=*/false), why));
  CHECK_THAT(why, FP8T_CONTAINS("skipped"));
  CHECK_FALSE(rule.judge(sample(4, NAN, 0.5), why));
  CHECK_FALSE(rule.judge(sample(4, 2.0, INFINITY), why));
  // Without kMinReferences references only finiteness is judged.
  CHECK(rule.judge(sample(4, 1e9, 1e9), why));
}

TEST_CASE("checkpoint health: a loss above 3 x or a gradient norm above 10 x the running median is a spike",
          "[checkpoint]") {
  const HealthRule rule = warmed_up();
  std::string why;
  CHECK(rule.judge(sample(4, 6.0, 5.0), why));  // exactly at both limits: healthy
  CHECK_FALSE(rule.judge(sample(4, 6.01, 0.5), why));
  CHECK_THAT(why, FP8T_CONTAINS("a loss spike"));
  CHECK_THAT(why, FP8T_CONTAINS("limit 3 x"));
  CHECK_FALSE(rule.judge(sample(4, 2.0, 5.01), why));
  CHECK_THAT(why, FP8T_CONTAINS("a gradient-norm spike"));
}

TEST_CASE("checkpoint health: a spike never becomes a reference; the window keeps the last 16", "[checkpoint]") {
  HealthRule rule = warmed_up();
  rule.observe(sample(4, 1e6, 1e6));  // a spike: not added
  CHECK(rule.references() == 3);
  std::string why;
  CHECK_FALSE(rule.judge(sample(5, 1e6, 1e6), why));
  for (int i = 0; i < 40; ++i) rule.observe(sample(10 + i, 1.0, 1.0));
  CHECK(rule.references() == HealthRule::kWindow);
  CHECK_FALSE(rule.judge(sample(60, 3.5, 1.0), why));  // the median is now 1.0: 3.5 > 3 x 1.0
}

TEST_CASE("checkpoint health: the way back passes over checkpoints whose next step was unhealthy", "[checkpoint]") {
  const std::map<int64_t, std::filesystem::path> kept = {
      {5, "r/checkpoint.step-5.pt"}, {6, "r/checkpoint.step-6.pt"}, {7, "r/checkpoint.pt"}};
  CheckpointHealth health;
  health.judge_checkpoint(sample(6, 2.1, 0.5));               // checkpoint 5: healthy
  health.judge_checkpoint(sample(7, 2.0, 0.5));               // checkpoint 6: healthy
  health.judge_checkpoint(sample(8, NAN, NAN, false));        // checkpoint 7: its next step was skipped
  REQUIRE(health.verdicts().size() == 3);
  CHECK_FALSE(health.verdicts().at(7).healthy);

  const WayBack back = choose_way_back(kept, health.verdicts(), /*first_skipped=*/8);
  REQUIRE(back.checkpoint.has_value());
  CHECK(back.checkpoint->first == 6);
  CHECK_THAT(back.explanation, FP8T_CONTAINS("Go back to step 6"));
  CHECK_THAT(back.explanation, FP8T_CONTAINS("step 7, trained from its weights, was healthy"));
  CHECK_THAT(back.explanation, FP8T_CONTAINS("Not step 7: step 8, trained from its weights, was not healthy"));

  // A checkpoint whose next step was never judged is taken (and said so); only known bad ones are passed.
  const WayBack unknown = choose_way_back({{4, "r/checkpoint.step-4.pt"}}, health.verdicts(), 8);
  REQUIRE(unknown.checkpoint.has_value());
  CHECK_THAT(unknown.explanation, FP8T_CONTAINS("not checked"));
  // Every kept one unhealthy: nothing, and why.
  const WayBack none = choose_way_back({{7, "r/checkpoint.pt"}}, health.verdicts(), 8);
  CHECK_FALSE(none.checkpoint.has_value());
  CHECK_THAT(none.explanation, FP8T_CONTAINS("had a healthy next step"));
}

TEST_CASE("checkpoint health: verdicts and references survive in metrics.jsonl rows", "[checkpoint]") {
  TempDir dir("checkpoint_health");
  CheckpointHealth first;
  for (int s = 1; s <= 3; ++s) first.observe(sample(s, 2.0, 0.5));
  const CheckpointVerdict& ok = first.judge_checkpoint(sample(5, 2.0, 0.5));
  const CheckpointVerdict& bad = first.judge_checkpoint(sample(6, NAN, NAN, false));
  {
    std::ofstream out(dir / "metrics.jsonl");
    for (int s = 1; s <= 3; ++s) out << nlohmann::json{{"step", s}, {"loss", 2.0}, {"grad_norm", 0.5}}.dump() << "\n";
    out << nlohmann::json{{"step", 5}, {"checkpoint_check", ok.to_json()}}.dump() << "\n";
    out << "{torn line\n";
    out << nlohmann::json{{"step", 6}, {"checkpoint_check", bad.to_json()}}.dump() << "\n";  // NaN: null
  }
  CheckpointHealth loaded;
  loaded.load(dir / "metrics.jsonl");
  REQUIRE(loaded.verdicts().size() == 2);
  CHECK(loaded.verdicts().at(4).healthy);
  CHECK_FALSE(loaded.verdicts().at(5).healthy);
  CHECK(std::isnan(loaded.verdicts().at(5).next.loss));
  // The references came back too: a spike against them is judged as one.
  CHECK_FALSE(loaded.judge_checkpoint(sample(8, 100.0, 0.5)).healthy);
  CheckpointHealth missing;
  missing.load(dir / "no-such.jsonl");
  CHECK(missing.verdicts().empty());
}
