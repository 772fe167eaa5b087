#include "lib/report/run_folder.h"

#include <fcntl.h>     // ::open
#include <sys/file.h>  // ::flock
#include <unistd.h>    // ::close

#include <cmath>    // std::isnan
#include <fstream>  // std::ofstream

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

TEST_CASE("read_run_folder: no summary.json and nobody holding the lock is unfinished, not running", "[report]") {
  TempDir tmp("report");
  fp8t::test::write_run(tmp / "r", "r", 0, "0.001");
  std::filesystem::remove(tmp / "r" / "summary.json");
  const std::filesystem::path lock = tmp / "r" / ".fp8train.lock";
  std::ofstream(lock) << "12345\n";  // left by a run that ended without writing its summary
  const auto stopped = read_run_folder(tmp / "r");
  REQUIRE(stopped.status == "unfinished");
  REQUIRE_THAT(stopped.problems.at(0), FP8T_CONTAINS("--resume"));
  // While a process holds the lock (as a training run does), the run is running.
  const int fd = ::open(lock.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const auto live = read_run_folder(tmp / "r");
  ::close(fd);
  REQUIRE(live.status == "running");
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
