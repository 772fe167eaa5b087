// lib/checkpoint/history.*: train.keep_checkpoints keeps the newest N checkpoints (each
// file's content the state of its step), --resume-from continues an older one and retires the
// later ones at the next save; no LibTorch involved (the files stand for checkpoints).
#include "lib/checkpoint/history.h"

#include <fstream>     // std::ofstream, std::ifstream
#include <functional>  // std::function
#include <sstream>  // std::stringstream
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/run/run_dir.h"  // write_text_atomic
#include "lib/util/error.h"   // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::test::TempDir;
using namespace fp8t::run;
using namespace fp8t::checkpoint;

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One checkpoint save as Checkpointer::save does it: checkpoint.pt replaced atomically in between.
void save(CheckpointHistory& h, const TempDir& dir, int64_t step) {
  h.before_save(step);
  write_text_atomic(dir / "checkpoint.pt", "state " + std::to_string(step));
  std::ofstream(dir / ("checkpoint.shard-0-of-1.step-" + std::to_string(step) + ".pt")) << "shard";
  h.after_save(step);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fp8t::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint history: keep_checkpoints 3 keeps the newest three states with their parts", "[checkpoint]") {
  TempDir dir("history_keep");
  CheckpointHistory h(dir.path(), 3, /*writer=*/true);
  for (int64_t step = 1; step <= 4; ++step) save(h, dir, step);
  REQUIRE(TempDir::list(dir.path()) ==
          std::vector<std::string>{"checkpoint.pt", "checkpoint.shard-0-of-1.step-2.pt",
                                   "checkpoint.shard-0-of-1.step-3.pt", "checkpoint.shard-0-of-1.step-4.pt",
                                   "checkpoint.step-2.pt", "checkpoint.step-3.pt"});
  // Each kept file holds its own step's state (a hard link made before checkpoint.pt was replaced).
  REQUIRE(read(dir / "checkpoint.step-2.pt") == "state 2");
  REQUIRE(read(dir / "checkpoint.step-3.pt") == "state 3");
  REQUIRE(read(dir / "checkpoint.pt") == "state 4");
  // The state before a first skipped step: the newest with a smaller step.
  REQUIRE(h.newest_before(4)->first == 3);
  REQUIRE(h.newest_before(4)->second == dir / "checkpoint.step-3.pt");
  REQUIRE(h.newest_before(9)->second == dir / "checkpoint.pt");
  REQUIRE_FALSE(h.newest_before(2).has_value());
  REQUIRE(h.describe() == "steps 2, 3, 4 (checkpoint.step-2.pt, checkpoint.step-3.pt, checkpoint.pt)");
}

TEST_CASE("checkpoint history: keep_checkpoints 1 keeps checkpoint.pt alone; a reader touches nothing", "[checkpoint]") {
  TempDir dir("history_one");
  CheckpointHistory h(dir.path(), 1, true);
  for (int64_t step = 1; step <= 3; ++step) save(h, dir, step);
  REQUIRE(TempDir::list(dir.path()) ==
          std::vector<std::string>{"checkpoint.pt", "checkpoint.shard-0-of-1.step-3.pt"});
  TempDir other("history_reader");
  std::ofstream(other / "checkpoint.step-1.pt") << "old";
  CheckpointHistory reader(other.path(), 1, /*writer=*/false);
  reader.before_save(5);
  reader.after_save(5);
  REQUIRE(TempDir::list(other.path()) == std::vector<std::string>{"checkpoint.step-1.pt"});
}

TEST_CASE("checkpoint history: the newest healthy checkpoint stays until a newer one is known healthy", "[checkpoint]") {
  // keep 2 (the default): 1 is judged healthy by step 2, 2 unhealthy by step 3 (the run went bad).
  TempDir dir("history_healthy");
  CheckpointHistory h(dir.path(), 2, /*writer=*/true);
  save(h, dir, 1);
  h.judged(1, true);
  save(h, dir, 2);
  h.judged(2, false);
  save(h, dir, 3);
  save(h, dir, 4);
  // Without the rule the rotation keeps 3 and 4 only, both trained after the bad update.
  REQUIRE(TempDir::list(dir.path()) ==
          std::vector<std::string>{"checkpoint.pt", "checkpoint.shard-0-of-1.step-1.pt",
                                   "checkpoint.shard-0-of-1.step-3.pt", "checkpoint.shard-0-of-1.step-4.pt",
                                   "checkpoint.step-1.pt", "checkpoint.step-3.pt"});
  REQUIRE(read(dir / "checkpoint.step-1.pt") == "state 1");
  REQUIRE(h.healthy_step() == 1);
  REQUIRE(h.checkpoints().count(1) == 1);
  // A verdict on a checkpoint the run cannot go back to (2: removed) changes nothing; a healthy
  // one on a kept checkpoint (3) takes over at the next save.
  h.judged(2, true);
  REQUIRE(h.healthy_step() == 1);
  h.judged(3, true);
  REQUIRE(h.healthy_step() == 3);
  REQUIRE(std::filesystem::exists(dir / "checkpoint.step-1.pt"));
  save(h, dir, 5);
  REQUIRE_FALSE(std::filesystem::exists(dir / "checkpoint.step-1.pt"));
  REQUIRE(std::filesystem::exists(dir / "checkpoint.step-3.pt"));  // healthy, though older than keep 2 holds
  REQUIRE(std::filesystem::exists(dir / "checkpoint.step-4.pt"));
}

TEST_CASE("checkpoint history: keep_checkpoints 1 keeps the healthy one before checkpoint.pt until its step", "[checkpoint]") {
  TempDir dir("history_healthy_one");
  CheckpointHistory h(dir.path(), 1, /*writer=*/true);
  save(h, dir, 1);
  h.judged(1, true);  // step 2 was healthy
  save(h, dir, 2);    // checkpoint.pt is 2, whose next step is not known yet: 1 stays
  REQUIRE(TempDir::list(dir.path()) ==
          std::vector<std::string>{"checkpoint.pt", "checkpoint.shard-0-of-1.step-1.pt",
                                   "checkpoint.shard-0-of-1.step-2.pt", "checkpoint.step-1.pt"});
  REQUIRE(read(dir / "checkpoint.step-1.pt") == "state 1");
  h.judged(2, true);  // step 3 was healthy: 1 goes at once, not at the next save
  REQUIRE(TempDir::list(dir.path()) ==
          std::vector<std::string>{"checkpoint.pt", "checkpoint.shard-0-of-1.step-2.pt"});
  h.judged(3, false);  // nothing to keep for an unhealthy one
  save(h, dir, 3);
  REQUIRE(read(dir / "checkpoint.step-2.pt") == "state 2");
  REQUIRE(h.checkpoints().size() == 2);
}

TEST_CASE("checkpoint history: --resume-from an older step continues it and retires the later ones", "[checkpoint]") {
  TempDir dir("history_rewind");
  {
    CheckpointHistory first(dir.path(), 3, true);
    for (int64_t step = 1; step <= 4; ++step) save(first, dir, step);  // kept 2, 3; checkpoint.pt 4
  }
  CheckpointHistory h(dir.path(), 3, true);  // a new process
  const ResumeSource src = h.resume_source("2");
  REQUIRE(src.file == dir / "checkpoint.step-2.pt");
  REQUIRE(src.expected_step == 2);
  h.resumed(src, 2);
  // Until the continued run saves, the later checkpoints stay (a plain --resume still finds 4).
  REQUIRE(std::filesystem::exists(dir / "checkpoint.step-3.pt"));
  REQUIRE(h.newest_before(9)->first == 2);  // but they are not what this run goes back to
  save(h, dir, 3);
  REQUIRE(TempDir::list(dir.path()) ==
          std::vector<std::string>{"checkpoint.pt", "checkpoint.shard-0-of-1.step-2.pt",
                                   "checkpoint.shard-0-of-1.step-3.pt", "checkpoint.step-2.pt"});
  REQUIRE(read(dir / "checkpoint.step-2.pt") == "state 2");
  REQUIRE(read(dir / "checkpoint.pt") == "state 3");
  save(h, dir, 4);
  REQUIRE(read(dir / "checkpoint.step-3.pt") == "state 3");
  REQUIRE(read(dir / "checkpoint.step-2.pt") == "state 2");
}

TEST_CASE("checkpoint history: what --resume-from cannot find is named, with what the folder keeps", "[checkpoint]") {
  TempDir dir("history_errors");
  CheckpointHistory none(dir.path(), 2, true);
  REQUIRE_THAT(error_of([&] { none.resume_source(""); }), FP8T_CONTAINS("does not exist"));
  std::ofstream(dir / "checkpoint.step-5.pt") << "s5";
  CheckpointHistory h(dir.path(), 2, true);
  const std::string no_current = error_of([&] { h.resume_source(""); });
  REQUIRE_THAT(no_current, FP8T_CONTAINS("--resume-from"));
  REQUIRE_THAT(no_current, FP8T_CONTAINS("step 5 (checkpoint.step-5.pt)"));
  REQUIRE_THAT(error_of([&] { h.resume_source("9"); }), FP8T_CONTAINS("no checkpoint of step 9; it keeps step 5"));
  REQUIRE_THAT(error_of([&] { h.resume_source(dir.path().string()); }), FP8T_CONTAINS("is a folder"));
  REQUIRE_THAT(error_of([&] { h.resume_source((dir / "nope.pt").string()); }), FP8T_CONTAINS("no such checkpoint file"));
  // A step checkpoint.pt may hold: checked once loaded (ResumeSource::expected_step).
  std::ofstream(dir / "checkpoint.pt") << "s9";
  const ResumeSource current = h.resume_source("9");
  REQUIRE(current.file == dir / "checkpoint.pt");
  REQUIRE(current.expected_step == 9);
  REQUIRE(h.resume_source((dir / "checkpoint.step-5.pt").string()).explicit_choice);
}
