// lib/train/train_checkpoint.*: the checks a resume makes before it loads anything. Short runs
// through the library API (text data, a one-layer model):
//   - a data file that is not the one the checkpoint was trained on is exit 2 naming it, with
//     nothing written; run.accept_data_change continues, and the next checkpoint records the
//     new file;
//   - a checkpoint without the record (an older fp8train) resumes, with a note in train.log;
//   - a ZeRO checkpoint whose shard files are missing is exit 2 naming them and the complete
//     older checkpoints, with the --resume-from that continues the newest.
#include "lib/train/train_checkpoint.h"

#include <filesystem>  // std::filesystem::copy_file
#include <fstream>     // std::ifstream, std::ofstream
#include <iterator>    // std::istreambuf_iterator
#include <string>      // std::string

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/checkpoint/checkpoint.h"  // load_checkpoint, save_checkpoint
#include "lib/train/job_fingerprint.h"  // file_fingerprint
#include "lib/train/trainer.h"          // run_training
#include "lib/util/error.h"             // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"

using namespace fp8t;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `n` bytes of text, a different pattern per `seed`.
void write_text(const fs::path& path, int n, int seed) {
  std::string text;
  for (int i = 0; i < n; ++i) text += static_cast<char>('a' + (i * (seed + 3) + i / 7) % 26);
  std::ofstream(path, std::ios::binary) << text;
}

config::LoadedConfig tiny_text_run(const fs::path& out_dir, const fs::path& data) {
  config::LoadedConfig c;
  c.config.run.out_dir = out_dir.string();
  c.config.run.name = "r";
  c.config.run.quiet = true;
  c.config.run.device = DeviceKind::kCpu;
  c.config.model.vocab_size = 256;
  c.config.model.n_layer = 1;
  c.config.model.d_model = 32;
  c.config.model.n_head = 2;
  c.config.model.seq_len = 16;
  c.config.data.source = DataSource::kText;
  c.config.data.train_path = {data.string()};
  c.config.data.order = DataOrder::kSequential;
  c.config.train.steps = 6;
  c.config.train.micro_batch_size = 2;
  c.config.train.warmup_steps = 0;
  c.config.train.log_interval = 1;
  c.config.train.eval_interval = 0;
  c.config.train.eval_batches = 1;
  return c;
}

train::TrainOptions stop_after(int64_t steps) {
  train::TrainOptions o;
  o.stop_after = steps;
  return o;
}

train::TrainOptions resume() {
  train::TrainOptions o;
  o.resume = true;
  return o;
}

// run_training must throw kBadInput; returns the message.
std::string bad_input(const config::LoadedConfig& run, const train::TrainOptions& options) {
  try {
    train::run_training(run, options);
  } catch (const Error& e) {
    REQUIRE(e.code() == ExitCode::kBadInput);
    return e.what();
  }
  FAIL("the resume was accepted");
  return "";
}

}  // namespace

TEST_CASE("resume checks: data that changed since the checkpoint is exit 2 unless accepted", "[train]") {
  test::TempDir tmp("resume_data");
  const fs::path data = tmp / "book.txt";
  write_text(data, 3000, 1);
  write_text(tmp / "other.txt", 3000, 2);  // the same size, other bytes
  auto run = tiny_text_run(tmp.path(), data);
  REQUIRE(train::run_training(run, stop_after(3))["status"] == "stopped");
  const fs::path folder = tmp / "r";
  REQUIRE(checkpoint::load_checkpoint(folder / "checkpoint.pt").meta.at("data_files").at(0).at("path") == data.string());

  fs::copy_file(tmp / "other.txt", data, fs::copy_options::overwrite_existing);
  const std::string checkpoint = read_all(folder / "checkpoint.pt"), metrics = read_all(folder / "metrics.jsonl");
  const std::string msg = bad_input(run, resume());
  INFO(msg);
  CHECK_THAT(msg, FP8T_CONTAINS("data.train_path: '" + data.string() + "' holds other data"));
  CHECK_THAT(msg, FP8T_CONTAINS("--accept-data-change"));
  CHECK(read_all(folder / "checkpoint.pt") == checkpoint);  // nothing written
  CHECK(read_all(folder / "metrics.jsonl") == metrics);

  run.config.run.accept_data_change = true;
  REQUIRE(train::run_training(run, resume())["status"] == "completed");
  CHECK_THAT(read_all(folder / "train.log"), FP8T_CONTAINS("on data files that differ from those it was trained on"));
  const nlohmann::json now = checkpoint::load_checkpoint(folder / "checkpoint.pt").meta.at("data_files");
  CHECK(now.at(0).at("fingerprint") == train::file_fingerprint(data));  // the next checkpoint records the new file
}

TEST_CASE("resume checks: a checkpoint without a data record resumes with a note", "[train]") {
  test::TempDir tmp("resume_old");
  const fs::path data = tmp / "book.txt";
  write_text(data, 3000, 1);
  const auto run = tiny_text_run(tmp.path(), data);
  REQUIRE(train::run_training(run, stop_after(3))["status"] == "stopped");
  const fs::path path = tmp / "r" / "checkpoint.pt";
  checkpoint::Checkpoint old = checkpoint::load_checkpoint(path);
  REQUIRE(old.meta.erase("data_files") == 1);  // as fp8train wrote it before the record
  checkpoint::save_checkpoint(path, old);
  REQUIRE(train::run_training(run, resume())["status"] == "completed");
  CHECK_THAT(read_all(tmp / "r" / "train.log"), FP8T_CONTAINS("records no data files (written by an older fp8train)"));
}

TEST_CASE("resume checks: missing ZeRO shard files name the complete older checkpoints", "[train]") {
  test::TempDir tmp("resume_shards");
  const fs::path data = tmp / "book.txt";
  write_text(data, 3000, 1);
  auto run = tiny_text_run(tmp.path(), data);
  run.config.train.checkpoint_interval = 1;
  run.config.train.keep_checkpoints = 3;
  REQUIRE(train::run_training(run, stop_after(3))["status"] == "stopped");
  const fs::path folder = tmp / "r";
  REQUIRE(fs::exists(folder / "checkpoint.step-1.pt"));
  REQUIRE(fs::exists(folder / "checkpoint.step-2.pt"));
  // Make checkpoint.pt (step 3) and checkpoint.step-2.pt ZeRO manifests whose shard files are not
  // there (a single process writes none); step 1 stays complete.
  auto lose_shards = [&](const fs::path& path, int64_t step) {
    checkpoint::Checkpoint ck = checkpoint::load_checkpoint(path);
    ck.meta["zero"] = {{"world_size", 2}, {"step", step}, {"level", 3},
                       {"shards", {{{"file", "checkpoint.shard-0-of-2.step-" + std::to_string(step) + ".pt"}, {"crc32c", 0}},
                                   {{"file", "checkpoint.shard-1-of-2.step-" + std::to_string(step) + ".pt"}, {"crc32c", 0}}}}};
    checkpoint::save_checkpoint(path, ck);
  };
  lose_shards(folder / "checkpoint.pt", 3);
  lose_shards(folder / "checkpoint.step-2.pt", 2);
  const std::string msg = bad_input(run, resume());
  INFO(msg);
  CHECK_THAT(msg, FP8T_CONTAINS("2 of its 2 ZeRO shard files are missing"));
  CHECK_THAT(msg, FP8T_CONTAINS("checkpoint.shard-1-of-2.step-3.pt"));
  CHECK_THAT(msg, FP8T_CONTAINS("the complete earlier checkpoints the folder keeps: step 1 (checkpoint.step-1.pt)"));
  CHECK_THAT(msg, FP8T_CONTAINS("--resume-from 1"));
  // The command it names works.
  train::TrainOptions from = resume();
  from.resume_from = "1";
  REQUIRE(train::run_training(run, from)["status"] == "completed");
}
