// lib/run/resume_config.*: which config changes a resume accepts, and the record it keeps.
#include "lib/run/resume_config.h"

#include <filesystem>  // std::filesystem::exists
#include <fstream>     // std::ifstream
#include <string>      // std::string

#include "lib/config/print.h"  // config::to_yaml
#include "lib/util/error.h"    // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::ExperimentConfig;
using fp8t::test::TempDir;
using fp8t::run::RunDir;

TEST_CASE("config_changes lists changed keys in schema order, run.* left out", "[run]") {
  ExperimentConfig before, after;
  after.train.lr = 1e-3;
  after.model.n_layer = 3;
  after.run.quiet = true;  // how the run is invoked: not a change of what it trains
  const auto changes = fp8t::run::config_changes(before, after);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].key == "model.n_layer");  // the model section comes before train
  CHECK_FALSE(changes[0].allowed);
  CHECK(changes[0].before == "2");
  CHECK(changes[0].after == "3");
  CHECK(changes[1].key == "train.lr");
  CHECK(changes[1].allowed);
  CHECK(fp8t::run::config_changes(before, before).empty());
}

TEST_CASE("a resume refuses model/data/precision changes and records the allowed ones", "[run]") {
  TempDir tmp("resume_config");
  const std::string out = (tmp / "runs").string();
  ExperimentConfig first;
  {
    const RunDir dir = RunDir::open(out, "r", RunDir::Mode::kCreate);
    dir.write_text_atomic("config.yaml", fp8t::config::to_yaml(first));
    std::ofstream(dir.checkpoint_path()) << "x";  // kResume needs one; this test never loads it
  }
  const RunDir dir = RunDir::open(out, "r", RunDir::Mode::kResume);

  ExperimentConfig bad = first;
  bad.precision = fp8t::Precision::kFp8;
  bad.data.val_fraction = 0.2;
  try {
    fp8t::run::check_resume_config(dir, bad);
    FAIL("a changed precision was accepted");
  } catch (const fp8t::Error& e) {
    CHECK(e.code() == fp8t::ExitCode::kBadInput);
    CHECK(std::string(e.what()).find("precision") != std::string::npos);
    CHECK(std::string(e.what()).find("data.val_fraction") != std::string::npos);
  }

  ExperimentConfig ok = first;
  ok.train.steps = 400;
  const auto changes = fp8t::run::check_resume_config(dir, ok);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].key == "train.steps");
  fp8t::run::record_resume_config(dir, changes, 120);
  const auto kept = dir.path() / "config.resume-120.yaml";
  REQUIRE(std::filesystem::exists(kept));
  std::ifstream in(kept);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text == fp8t::config::to_yaml(first));  // the replaced config, unchanged
}

TEST_CASE("a resume compares resolved configs: keys the run folder's config.yaml leaves out are defaults", "[run]") {
  // A config.yaml that lists only some keys (written by hand, or before a key existed): each key
  // it leaves out compares as its default.
  TempDir tmp("resume_config_short");
  const std::string out = (tmp / "runs").string();
  {
    const RunDir dir = RunDir::open(out, "r", RunDir::Mode::kCreate);
    dir.write_text_atomic("config.yaml", "model:\n  n_layer: 3\ntrain:\n  steps: 40\n");
    std::ofstream(dir.checkpoint_path()) << "x";  // kResume needs one; this test never loads it
  }
  const RunDir dir = RunDir::open(out, "r", RunDir::Mode::kResume);
  ExperimentConfig same;  // the same resolved config, as a minimal file given now resolves
  same.model.n_layer = 3;
  same.train.steps = 40;
  CHECK(fp8t::run::check_resume_config(dir, same).empty());

  ExperimentConfig lr = same;  // a key the file left out, changed now: before is its default
  lr.train.lr = ExperimentConfig{}.train.lr * 2;
  const auto changes = fp8t::run::check_resume_config(dir, lr);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].key == "train.lr");
  CHECK(changes[0].allowed);

  ExperimentConfig width = same;  // a model key the file left out, changed now: refused, named
  width.model.d_model = ExperimentConfig{}.model.d_model * 2;
  try {
    fp8t::run::check_resume_config(dir, width);
    FAIL("a changed model.d_model was accepted");
  } catch (const fp8t::Error& e) {
    CHECK(e.code() == fp8t::ExitCode::kBadInput);
    CHECK(std::string(e.what()).find("model.d_model") != std::string::npos);
  }
}
