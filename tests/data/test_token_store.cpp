// A token file that changes while a run reads it: TokenStore reads windows with pread, so a
// truncated file is a short read reported as kTrainingFailed (exit 3) naming the file, never a
// SIGBUS; a token rewritten beyond the vocabulary is reported the same way.
#include "lib/data/token_store.h"

#include <cstdint>     // int64_t, uint16_t, uint32_t
#include <filesystem>  // std::filesystem::resize_file
#include <fstream>     // std::fstream
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/data/dataset.h"
#include "lib/data/token_file.h"
#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/data/data_test_files.h"

using fp8t::data::Dataset;
using fp8t::data::read_token_file;
using fp8t::data::testing::llmc_shard_bytes;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::write_bytes;

namespace {

// `action` must throw kTrainingFailed whose message contains every needle.
template <typename F>
void require_training_failed(F&& action, std::initializer_list<std::string> needles) {
  try {
    action();
    FAIL("expected a training failure, nothing was thrown");
  } catch (const fp8t::Error& e) {
    INFO("message: " << e.what());
    REQUIRE(e.code() == fp8t::ExitCode::kTrainingFailed);
    for (const std::string& needle : needles) REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS(needle));
  }
}

std::vector<uint32_t> ramp(int64_t n) {
  std::vector<uint32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % 500);
  return t;
}

}  // namespace

TEST_CASE("a token file truncated after it was opened is a training failure naming it", "[data]") {
  ScratchDir dir;
  const std::string path = dir.file("shard.bin");
  write_bytes(path, llmc_shard_bytes<uint32_t>(ramp(4000), 20240801, 7));
  const auto file = read_token_file(path, "data.train_path");
  REQUIRE(file.tokens.file_backed());
  std::vector<int64_t> window(16);
  file.tokens.copy_to(3984, 16, window.data());
  REQUIRE(window[15] == 3999 % 500);
  std::filesystem::resize_file(path, 1024 + 2000 * 4);  // what `cp` over the file does for a moment
  file.tokens.copy_to(1000, 16, window.data());          // still inside the file: read as before
  REQUIRE(window[0] == 1000 % 500);
  require_training_failed([&] { file.tokens.copy_to(3984, 16, window.data()); },
                          {path, "changed while the run reads it", "is now 9024 bytes", "--resume"});
}

TEST_CASE("a training batch from a truncated or rewritten shard fails with the file's name", "[data]") {
  ScratchDir dir;
  for (const char* name : {"a.bin", "b.bin"}) {
    write_bytes(dir.file(name), llmc_shard_bytes<uint16_t>(ramp(3000), 20240520, 1));
  }
  fp8t::DataSection data;
  data.source = fp8t::DataSource::kTokens;
  data.order = fp8t::DataOrder::kSequential;
  data.train_path = {dir.file("a.bin"), dir.file("b.bin")};
  fp8t::ModelSection model;
  model.vocab_size = 512;
  model.seq_len = 32;
  Dataset d = Dataset::open(data, model, 3);
  d.next_train(8);

  SECTION("truncated") {
    std::filesystem::resize_file(dir.file("b.bin"), 1024);  // the header alone: every window of b.bin is gone
    // 186 windows of 32 over both files: a pass of batches of 8 reaches b.bin within the epoch.
    require_training_failed([&] { for (int i = 0; i < 24; ++i) d.next_train(8); },
                            {dir.file("b.bin"), "is now 1024 bytes"});
  }
  SECTION("a token rewritten beyond model.vocab_size") {
    const std::vector<uint32_t> bad(3000, 600);
    write_bytes(dir.file("a.bin"), llmc_shard_bytes<uint16_t>(bad, 20240520, 1));  // same size, new tokens
    require_training_failed([&] { for (int i = 0; i < 24; ++i) d.next_train(8); },
                            {dir.file("a.bin"), "token 600", "model.vocab_size 512"});
  }
}
