#include "lib/report/run_folder.h"

#include <cmath>  // std::isnan

#include "tests/catch.h"
#include "tests/report/report_test_util.h"  // write_run, write_file
#include "tests/temp_dir.h"                 // TempDir

using fp8t::report::read_run_folder;
using fp8t::test::TempDir;

TEST_CASE("read_run_folder reads config, summary, curves and FP8 history", "[report]") {
  TempDir tmp("report");
  fp8t::test::write_run(tmp / "a", "alpha", 2, "0.001");
  const auto run = read_run_folder(tmp / "a");
  REQUIRE(run.is_run);
  REQUIRE(run.problems.empty());
  REQUIRE(run.name == "alpha");
  REQUIRE(run.status == "completed");
  REQUIRE(run.config.at("fp8.margin") == "2");
  REQUIRE(run.config.at("fp8.override_linear_precision") == "[0, 0, 1]");
  REQUIRE(run.loss.step == std::vector<int64_t>{10, 20});
  REQUIRE(run.loss.value == std::vector<double>{3.5, 2.25});
  REQUIRE(std::isnan(run.grad_norm.value[1]));  // null in the file
  REQUIRE(run.val_loss.step == std::vector<int64_t>{20});
  REQUIRE(run.fp8.steps == std::vector<int64_t>{10, 20});
  REQUIRE(run.fp8.slots.size() == 2);
  REQUIRE(run.fp8.slots[1].slot == "h0.fc2.grad");
  REQUIRE(run.fp8.slots[1].underflow == std::vector<double>{0.5, 0.5});
}

TEST_CASE("read_run_folder marks a run without summary.json as running and skips a torn last line", "[report]") {
  TempDir tmp("report");
  fp8t::test::write_run(tmp / "r", "r", 0, "0.001");
  std::filesystem::remove(tmp / "r" / "summary.json");
  std::ofstream(tmp / "r" / "metrics.jsonl", std::ios::app) << "{\"step\":30,\"lo";  // being written
  const auto run = read_run_folder(tmp / "r");
  REQUIRE(run.is_run);
  REQUIRE(run.status == "running");
  REQUIRE(run.name == "r");
  REQUIRE(run.problems.size() == 1);  // the missing summary only: the torn line is expected
  REQUIRE_THAT(run.problems[0], FP8T_CONTAINS("no summary.json"));
  REQUIRE(run.loss.step.back() == 20);
}

TEST_CASE("read_run_folder says what is wrong with folders that are not runs", "[report]") {
  TempDir tmp("report");
  std::filesystem::create_directories(tmp / "empty");
  const auto empty = read_run_folder(tmp / "empty");
  REQUIRE_FALSE(empty.is_run);
  REQUIRE_THAT(empty.problems.at(0), FP8T_CONTAINS("not a run folder"));
  const auto missing = read_run_folder(tmp / "nope");
  REQUIRE_FALSE(missing.is_run);
  REQUIRE_THAT(missing.problems.at(0), FP8T_CONTAINS("does not exist"));

  fp8t::test::write_file(tmp / "bad" / "summary.json", "{\"status\": \"failed\"}");
  fp8t::test::write_file(tmp / "bad" / "metrics.jsonl", "{\"step\":1,\"loss\":4.0}\nnot json\n{\"step\":2,\"loss\":3.0}\n");
  const auto bad = read_run_folder(tmp / "bad");
  REQUIRE(bad.is_run);
  REQUIRE(bad.status == "failed");
  REQUIRE(bad.loss.value == std::vector<double>{4.0, 3.0});
  REQUIRE(bad.problems.size() == 2);  // no config.yaml; one unreadable metrics line
}
