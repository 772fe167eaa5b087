#include "lib/run/run_dir.h"

#include <unistd.h>  // ::getpid

#include <fstream>   // std::ofstream, std::ifstream
#include <optional>  // std::optional

#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::test::TempDir;
using fp8t::run::RunDir;
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

TEST_CASE("RunDir kCreate makes the folder only when opened", "[run]") {
  TempDir tmp("rundir");
  const std::string out = (tmp / "runs").string();
  RunDir::check(out, "exp1", RunDir::Mode::kCreate);
  REQUIRE_FALSE(fs::exists(tmp / "runs"));  // check() writes nothing

  std::optional<RunDir> first = RunDir::open(out, "exp1", RunDir::Mode::kCreate);
  const RunDir run = *first;  // a copy shares the lock
  REQUIRE(fs::is_directory(tmp / "runs" / "exp1"));
  REQUIRE(run.path() == fs::path(out) / "exp1");
  REQUIRE(run.config_path() == run.path() / "config.yaml");
  REQUIRE(run.log_path() == run.path() / "train.log");
  REQUIRE(run.metrics_path() == run.path() / "metrics.jsonl");
  REQUIRE(run.summary_path() == run.path() / "summary.json");
  REQUIRE(run.checkpoint_path() == run.path() / "checkpoint.pt");
  REQUIRE(TempDir::list(run.path()) == std::vector<std::string>{".fp8train.lock"});
  REQUIRE(run.locked());
  REQUIRE(read_all(run.path() / ".fp8train.lock") == std::to_string(::getpid()) + "\n");
  REQUIRE_FALSE(RunDir::locate(out, "exp1").locked());

  // While the lock is held, a second writer (any mode) is refused, naming the holder's pid.
  for (RunDir::Mode mode : {RunDir::Mode::kCreate, RunDir::Mode::kOverwrite}) {
    REQUIRE_THAT(error_of([&] { RunDir::open(out, "exp1", mode); }),
                 FP8T_CONTAINS("in use by pid " + std::to_string(::getpid())));
    REQUIRE_THAT(error_of([&] { RunDir::check(out, "exp1", mode); }), FP8T_CONTAINS("in use by pid"));
  }
  first.reset();
  REQUIRE(run.locked());  // the copy still holds it
  REQUIRE_THAT(error_of([&] { RunDir::open(out, "exp1", RunDir::Mode::kCreate); }), FP8T_CONTAINS("in use"));
}

TEST_CASE("RunDir kCreate accepts an empty folder and refuses a used one", "[run]") {
  TempDir tmp("rundir_used");
  const std::string out = (tmp / "runs").string();
  fs::create_directories(tmp / "runs" / "exp1");
  // An existing empty folder (or one with only a released lock file) is fine.
  RunDir::open(out, "exp1", RunDir::Mode::kCreate);  // a temporary: unlocked again at once
  const RunDir run = RunDir::locate(out, "exp1");
  RunDir::open(out, "exp1", RunDir::Mode::kCreate);
  touch(run.config_path());
  const std::string msg = error_of([&] { RunDir::open(out, "exp1", RunDir::Mode::kCreate); });
  REQUIRE_THAT(msg, FP8T_CONTAINS(run.path().string()));
  REQUIRE_THAT(msg, FP8T_CONTAINS("--run-name"));
  REQUIRE_THAT(msg, FP8T_CONTAINS("--overwrite"));
  REQUIRE_THAT(msg, FP8T_CONTAINS("--resume"));
}

TEST_CASE("RunDir kResume removes the temporary files of killed writes", "[run]") {
  TempDir tmp("rundir_leftovers");
  const fs::path dir = tmp / "r";
  fs::create_directories(dir);
  touch(dir / "checkpoint.pt");
  touch(dir / ".checkpoint.pt.tmp.99.0");
  touch(dir / ".checkpoint.prev.pt.tmp.99");
  touch(dir / ".metrics.jsonl.tmp.5.1");
  touch(dir / ".checkpoint.step-4.pt.tmp.99.link");                 // a kept checkpoint's link
  touch(dir / ".checkpoint.shard-0-of-2.step-4.pt.tmp.99.3");       // a ZeRO shard's write
  touch(dir / "notes.txt");
  const RunDir run = RunDir::open(tmp.path().string(), "r", RunDir::Mode::kResume);
  REQUIRE(run.removed_files() ==
          std::vector<std::string>{".checkpoint.prev.pt.tmp.99", ".checkpoint.pt.tmp.99.0",
                                   ".checkpoint.shard-0-of-2.step-4.pt.tmp.99.3", ".checkpoint.step-4.pt.tmp.99.link",
                                   ".metrics.jsonl.tmp.5.1"});
  REQUIRE(TempDir::list(dir) == std::vector<std::string>{".fp8train.lock", "checkpoint.pt", "notes.txt"});
}

TEST_CASE("RunDir kOverwrite deletes only the files fp8train writes", "[run]") {
  TempDir tmp("rundir_over");
  const fs::path dir = tmp / "runs" / "a";
  fs::create_directories(dir / "plots");
  for (const std::string& f : RunDir::managed_files()) touch(dir / f);
  touch(dir / ".checkpoint.pt.tmp.123.0");  // left over by a killed save
  touch(dir / "notes.txt", "mine");
  touch(dir / "plots" / "loss.png");
  touch(dir / "checkpoint.pt.bak");
  touch(dir / "config.resume-40.yaml");
  touch(dir / "checkpoint.step-30.pt");                    // a kept checkpoint
  touch(dir / "checkpoint.shard-1-of-2.step-30.pt");       // and its ZeRO shard
  touch(dir / "checkpoint.step-x.pt");                     // not a name fp8train writes

  const RunDir run = RunDir::open((tmp / "runs").string(), "a", RunDir::Mode::kOverwrite);
  REQUIRE(TempDir::list(dir) == std::vector<std::string>{".fp8train.lock", "checkpoint.pt.bak",
                                                         "checkpoint.step-x.pt", "notes.txt", "plots"});
  REQUIRE(run.removed_files() ==
          std::vector<std::string>{".checkpoint.pt.tmp.123.0", "checkpoint.prev.pt", "checkpoint.pt",
                                   "checkpoint.shard-1-of-2.step-30.pt", "checkpoint.step-30.pt",
                                   "config.resume-40.yaml", "config.yaml", "metrics.jsonl", "summary.json",
                                   "train.log"});
  REQUIRE(read_all(dir / "notes.txt") == "mine");
  REQUIRE(fs::exists(dir / "plots" / "loss.png"));

  // Overwrite of a run that does not exist yet creates it.
  const RunDir fresh = RunDir::open((tmp / "runs").string(), "b", RunDir::Mode::kOverwrite);
  REQUIRE(fs::is_directory(fresh.path()));
}

TEST_CASE("RunDir kResume needs the folder and its checkpoint", "[run]") {
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

TEST_CASE("RunDir rejects bad names and non-folders", "[run]") {
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

TEST_CASE("RunDir::write_text_atomic replaces files without leftovers", "[run]") {
  TempDir tmp("rundir_write");
  const RunDir run = RunDir::open(tmp.path().string(), "w", RunDir::Mode::kCreate);
  run.write_text_atomic("config.yaml", "a: 1\n");
  REQUIRE(read_all(run.config_path()) == "a: 1\n");
  run.write_text_atomic("config.yaml", "b: 2\n");
  REQUIRE(read_all(run.config_path()) == "b: 2\n");
  REQUIRE(TempDir::list(run.path()) == std::vector<std::string>{".fp8train.lock", "config.yaml"});
  // Into a folder that does not exist: fails, naming the file.
  try {
    run.write_text_atomic("missing/config.yaml", "c");
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("config.yaml"));
  }
}

TEST_CASE("RunDir kResume accepts a folder whose only checkpoints are kept older ones", "[run]") {
  TempDir tmp("rundir_kept");
  fs::create_directories(tmp / "r");
  touch(tmp / "r" / "config.yaml");
  REQUIRE_THROWS_AS(RunDir::check(tmp.path().string(), "r", RunDir::Mode::kResume), fp8t::Error);
  touch(tmp / "r" / "checkpoint.step-5.pt");
  RunDir::check(tmp.path().string(), "r", RunDir::Mode::kResume);  // --resume-from 5 can continue it
}

TEST_CASE("write_file_atomic: temporary names fit in 255 bytes, and stale ones are removed", "[run]") {
  TempDir tmp("rundir_tmpnames");
  // A legal 252-byte name: ".<name>.tmp.<pid>.<n>" would pass 255 bytes, so the name is cut and hashed.
  const std::string name = std::string(246, 'w') + ".bin1";  // 251 bytes
  const fs::path target = tmp / (name + "x");
  REQUIRE(target.filename().string().size() == 252);
  const std::string prefix = fp8t::run::temporary_prefix(target);
  REQUIRE(prefix.size() + 31 <= 255);  // with the pid (10 digits), "." and the counter (20) at their longest
  REQUIRE(prefix.rfind(".www", 0) == 0);
  REQUIRE(prefix != fp8t::run::temporary_prefix(tmp / (name + "y")));  // the hash tells them apart
  fp8t::run::write_text_atomic(target, "data");
  REQUIRE(read_all(target) == "data");
  REQUIRE(TempDir::list(tmp.path()) == std::vector<std::string>{target.filename().string()});
  // A short name keeps its readable form.
  REQUIRE(fp8t::run::temporary_prefix(tmp / "model.safetensors") == ".model.safetensors.tmp.");

  // Leftovers of a dead writer go; those of a live one (this process) and other files stay.
  const fs::path out = tmp / "model.safetensors";
  const std::string dead = ".model.safetensors.tmp.2147483646.0";  // no such pid (above pid_max)
  const std::string live = ".model.safetensors.tmp." + std::to_string(::getpid()) + ".9";
  touch(tmp / dead);
  touch(tmp / live);
  touch(tmp / ".other.tmp.2147483646.0");
  REQUIRE(fp8t::run::remove_stale_temporaries(out) == std::vector<std::string>{dead});
  REQUIRE(fs::exists(tmp / live));
  REQUIRE(fs::exists(tmp / ".other.tmp.2147483646.0"));
}

TEST_CASE("FP8TRAIN_TEST_ENOSPC fails exactly the writes of the named file, as a full disk does", "[run]") {
  TempDir tmp("rundir_enospc");
  ::setenv("FP8TRAIN_TEST_ENOSPC", "summary.json", 1);
  std::string what;
  try {
    fp8t::run::write_text_atomic(tmp / "summary.json", "{}");
  } catch (const fp8t::Error& e) {
    what = e.what();
  }
  fp8t::run::write_text_atomic(tmp / "config.yaml", "a: 1");  // another file is written
  ::unsetenv("FP8TRAIN_TEST_ENOSPC");
  REQUIRE_THAT(what, FP8T_CONTAINS("No space left on device"));
  REQUIRE(TempDir::list(tmp.path()) == std::vector<std::string>{"config.yaml"});  // no temporary file left
}
