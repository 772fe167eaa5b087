#include "lib/train/run_dir.h"

#include <fstream>  // std::ofstream, std::ifstream

#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/train/temp_dir.h"

using fp8t::test::TempDir;
using fp8t::train::RunDir;
namespace fs = std::filesystem;

namespace {

void touch(const fs::path& p, const std::string& text = "x") { std::ofstream(p) << text; }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    return e.what();
  }
  FAIL("no throw");
  return "";
}

}  // namespace

TEST_CASE("RunDir kCreate makes the folder only when opened", "[train]") {
  TempDir tmp("rundir");
  const std::string out = (tmp / "runs").string();
  RunDir::check(out, "exp1", RunDir::Mode::kCreate);
  REQUIRE_FALSE(fs::exists(tmp / "runs"));  // check() writes nothing

  const RunDir run = RunDir::open(out, "exp1", RunDir::Mode::kCreate);
  REQUIRE(fs::is_directory(tmp / "runs" / "exp1"));
  REQUIRE(run.path() == fs::path(out) / "exp1");
  REQUIRE(run.config_path() == run.path() / "config.yaml");
  REQUIRE(run.log_path() == run.path() / "train.log");
  REQUIRE(run.metrics_path() == run.path() / "metrics.jsonl");
  REQUIRE(run.summary_path() == run.path() / "summary.json");
  REQUIRE(run.checkpoint_path() == run.path() / "checkpoint.pt");
  REQUIRE(TempDir::list(run.path()).empty());

  // An existing empty folder is fine; a non-empty one is refused with the ways out.
  REQUIRE_NOTHROW(RunDir::open(out, "exp1", RunDir::Mode::kCreate));
  touch(run.config_path());
  const std::string msg = error_of([&] { RunDir::open(out, "exp1", RunDir::Mode::kCreate); });
  REQUIRE_THAT(msg, FP8T_CONTAINS(run.path().string()));
  REQUIRE_THAT(msg, FP8T_CONTAINS("--run-name"));
  REQUIRE_THAT(msg, FP8T_CONTAINS("--overwrite"));
  REQUIRE_THAT(msg, FP8T_CONTAINS("--resume"));
}

TEST_CASE("RunDir kOverwrite deletes only the files fp8train writes", "[train]") {
  TempDir tmp("rundir_over");
  const fs::path dir = tmp / "runs" / "a";
  fs::create_directories(dir / "plots");
  for (const std::string& f : RunDir::managed_files()) touch(dir / f);
  touch(dir / ".checkpoint.pt.tmp.123.0");  // left over by a killed save
  touch(dir / "notes.txt", "mine");
  touch(dir / "plots" / "loss.png");
  touch(dir / "checkpoint.pt.bak");

  const RunDir run = RunDir::open((tmp / "runs").string(), "a", RunDir::Mode::kOverwrite);
  REQUIRE(TempDir::list(dir) == std::vector<std::string>{"checkpoint.pt.bak", "notes.txt", "plots"});
  REQUIRE(run.removed_files() ==
          std::vector<std::string>{".checkpoint.pt.tmp.123.0", "checkpoint.pt", "config.yaml",
                                   "metrics.jsonl", "summary.json", "train.log"});
  REQUIRE(read_all(dir / "notes.txt") == "mine");
  REQUIRE(fs::exists(dir / "plots" / "loss.png"));

  // Overwrite of a run that does not exist yet creates it.
  const RunDir fresh = RunDir::open((tmp / "runs").string(), "b", RunDir::Mode::kOverwrite);
  REQUIRE(fs::is_directory(fresh.path()));
}

TEST_CASE("RunDir kResume needs the folder and its checkpoint", "[train]") {
  TempDir tmp("rundir_resume");
  const std::string out = tmp.path().string();
  REQUIRE_THAT(error_of([&] { RunDir::open(out, "r", RunDir::Mode::kResume); }),
               FP8T_CONTAINS("does not exist"));
  REQUIRE_FALSE(fs::exists(tmp / "r"));

  fs::create_directories(tmp / "r");
  touch(tmp / "r" / "metrics.jsonl", "{\"step\":1}\n");
  const std::string msg = error_of([&] { RunDir::open(out, "r", RunDir::Mode::kResume); });
  REQUIRE_THAT(msg, FP8T_CONTAINS("checkpoint.pt"));

  touch(tmp / "r" / "checkpoint.pt");
  const RunDir run = RunDir::open(out, "r", RunDir::Mode::kResume);
  REQUIRE(read_all(run.metrics_path()) == "{\"step\":1}\n");  // nothing removed
}

TEST_CASE("RunDir rejects bad names and non-folders", "[train]") {
  TempDir tmp("rundir_names");
  const std::string out = tmp.path().string();
  for (const std::string name : {"", ".", "..", "a/b", "../escape"}) {
    INFO("name '" << name << "'");
    REQUIRE_THAT(error_of([&] { RunDir::open(out, name, RunDir::Mode::kCreate); }),
                 FP8T_CONTAINS("run.name"));
  }
  touch(tmp / "file");
  REQUIRE_THAT(error_of([&] { RunDir::open(out, "file", RunDir::Mode::kOverwrite); }),
               FP8T_CONTAINS("not a folder"));
  REQUIRE(TempDir::list(tmp.path()) == std::vector<std::string>{"file"});
}

TEST_CASE("RunDir::write_text_atomic replaces files without leftovers", "[train]") {
  TempDir tmp("rundir_write");
  const RunDir run = RunDir::open(tmp.path().string(), "w", RunDir::Mode::kCreate);
  run.write_text_atomic("config.yaml", "a: 1\n");
  REQUIRE(read_all(run.config_path()) == "a: 1\n");
  run.write_text_atomic("config.yaml", "b: 2\n");
  REQUIRE(read_all(run.config_path()) == "b: 2\n");
  REQUIRE(TempDir::list(run.path()) == std::vector<std::string>{"config.yaml"});
  // Into a folder that does not exist: fails, naming the file.
  try {
    run.write_text_atomic("missing/config.yaml", "c");
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("config.yaml"));
  }
}
