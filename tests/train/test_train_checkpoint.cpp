// lib/train/train_checkpoint.*: checkpoints record the FP8 recipe; a resume under current scaling
// continues bit for bit; a resume under another recipe is exit 2 naming both. Short runs through
// the library API (one straight run, one split run; the CLI resume test covers delayed scaling).
#include "lib/train/train_checkpoint.h"

#include <fstream>  // std::ifstream
#include <string>   // std::string, std::getline
#include <vector>   // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/checkpoint/checkpoint.h"  // load_checkpoint
#include "lib/train/trainer.h"   // run_training
#include "lib/util/error.h"      // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"

using namespace fp8t;

namespace {

config::LoadedConfig tiny_fp8_run(const std::string& out_dir, const std::string& name, fp8::RecipeKind kind) {
  config::LoadedConfig c;
  c.config.run.out_dir = out_dir;
  c.config.run.name = name;
  c.config.run.quiet = true;
  c.config.run.device = DeviceKind::kCpu;
  c.config.precision = Precision::kFp8;
  c.config.fp8.kind = kind;
  c.config.model.n_layer = 1;
  c.config.model.d_model = 32;
  c.config.model.n_head = 2;
  c.config.model.seq_len = 16;
  c.config.train.steps = 12;
  c.config.train.micro_batch_size = 4;
  c.config.train.grad_accum_steps = 2;  // the weight cache across micro-batches, too
  c.config.train.warmup_steps = 2;
  c.config.train.log_interval = 1;
  c.config.train.eval_interval = 0;
  return c;
}

// The loss of every logged step, as written (bit-exact comparison of the text).
std::vector<std::string> losses(const std::filesystem::path& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.contains("loss")) out.push_back(row["loss"].dump());
  }
  return out;
}

}  // namespace

TEST_CASE("train checkpoint: current scaling resumes bit for bit and records its recipe", "[train]") {
  test::TempDir tmp("train_checkpoint_current");
  const auto straight = tiny_fp8_run(tmp.path().string(), "straight", fp8::RecipeKind::kCurrent);
  REQUIRE(train::run_training(straight, {})["status"] == "completed");

  const auto split = tiny_fp8_run(tmp.path().string(), "split", fp8::RecipeKind::kCurrent);
  train::TrainOptions first;
  first.stop_after = 5;
  REQUIRE(train::run_training(split, first)["status"] == "stopped");
  const auto ck = checkpoint::load_checkpoint(tmp.path() / "split" / "checkpoint.pt");
  REQUIRE(ck.meta.at("fp8_recipe") == "current");

  train::TrainOptions resume;
  resume.resume = true;
  REQUIRE(train::run_training(split, resume)["status"] == "completed");
  const auto a = losses(tmp.path() / "straight" / "metrics.jsonl");
  REQUIRE(a.size() == 12);
  REQUIRE(std::stod(a.back()) < std::stod(a.front()));  // it trains under current scaling
  REQUIRE(a == losses(tmp.path() / "split" / "metrics.jsonl"));
}

TEST_CASE("train checkpoint: a resume under another recipe is exit 2 naming both", "[train]") {
  test::TempDir tmp("train_checkpoint_other");
  auto run = tiny_fp8_run(tmp.path().string(), "r", fp8::RecipeKind::kDelayed);
  run.config.train.steps = 4;
  train::TrainOptions first;
  first.stop_after = 2;
  train::run_training(run, first);
  auto other = run;
  other.config.fp8.kind = fp8::RecipeKind::kCurrent;
  train::TrainOptions resume;
  resume.resume = true;
  try {
    train::run_training(other, resume);
    FAIL("a resume under another recipe was accepted");
  } catch (const Error& e) {
    REQUIRE(e.code() == ExitCode::kBadInput);
    const std::string msg = e.what();
    INFO(msg);
    REQUIRE(msg.find("fp8.recipe") != std::string::npos);
    REQUIRE(msg.find("delayed") != std::string::npos);
    REQUIRE(msg.find("current") != std::string::npos);
  }
}
