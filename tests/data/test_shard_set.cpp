#include "lib/data/shard_set.h"

#include <cstdint>  // int64_t, uint16_t, uint32_t
#include <memory>   // std::make_shared
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/data/dataset.h"
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"
#include "tests/data/data_test_files.h"

using fp8t::data::Dataset;
using fp8t::data::ShardSet;
using fp8t::data::TokenSpan;
using fp8t::data::TokenStore;
using fp8t::data::testing::llmc_shard_bytes;
using fp8t::data::testing::require_bad_input;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::model_of;
using fp8t::data::testing::write_bytes;

namespace {

TokenSpan span_of(int64_t n, int64_t begin = 0) {
  auto store = std::make_shared<const TokenStore>(TokenStore::Storage(std::vector<uint16_t>(n, 1)));
  return {store, "mem", begin, n};
}

}  // namespace

TEST_CASE("ShardSet numbers starts and non-overlapping windows file after file", "[data]") {
  // seq_len 4; spans of 9 tokens (5 starts, 2 windows), of tokens [3, 20) of a store (13 starts,
  // 4 windows), and of exactly one window (1 start, 1 window).
  const ShardSet set({span_of(9), span_of(20, 3), span_of(5)}, 4);
  REQUIRE(set.tokens() == 9 + 17 + 5);
  REQUIRE(set.starts() == 5 + 13 + 1);
  REQUIRE(set.windows() == 2 + 4 + 1);
  auto at = [](fp8t::data::WindowAt w) { return std::vector<int64_t>{w.span, w.offset}; };
  CHECK(at(set.start(0)) == std::vector<int64_t>{0, 0});
  CHECK(at(set.start(4)) == std::vector<int64_t>{0, 4});
  CHECK(at(set.start(5)) == std::vector<int64_t>{1, 3});  // offsets index the store, from the span's begin
  CHECK(at(set.start(17)) == std::vector<int64_t>{1, 15});
  CHECK(at(set.start(18)) == std::vector<int64_t>{2, 0});
  CHECK(at(set.window(1)) == std::vector<int64_t>{0, 4});
  CHECK(at(set.window(2)) == std::vector<int64_t>{1, 3});
  CHECK(at(set.window(5)) == std::vector<int64_t>{1, 15});  // tokens 15..19 of the store: the last window
  CHECK(at(set.window(6)) == std::vector<int64_t>{2, 0});
  CHECK_THROWS(set.window(7));
  CHECK_THROWS(set.start(19));
}

TEST_CASE("several token files: every file is validated up front, the first bad one named", "[data]") {
  ScratchDir dir;
  const std::vector<uint32_t> good(100, 7);
  for (const char* name : {"t_0.bin", "t_1.bin", "t_2.bin", "t_3.bin"}) {
    write_bytes(dir.file(name), llmc_shard_bytes<uint16_t>(good, 20240520, 1));
  }
  fp8t::DataSection data;
  data.source = fp8t::DataSource::kTokens;
  data.train_path = {dir.file("t_*.bin")};
  const fp8t::ModelSection model = model_of(64, 8);
  auto open = [&] { return Dataset::open(data, model, 1); };
  REQUIRE(open().train_files() == 4);

  SECTION("wrong magic") {
    write_bytes(dir.file("t_1.bin"), llmc_shard_bytes<uint16_t>(good, 20240521, 1));
    write_bytes(dir.file("t_2.bin"), llmc_shard_bytes<uint16_t>(good, 20240522, 1));
    require_bad_input(open, {dir.file("t_1.bin"), "data.train_path", "bad magic 20240521"});
  }
  SECTION("truncated") {
    auto bytes = llmc_shard_bytes<uint16_t>(good, 20240520, 1);
    bytes.resize(bytes.size() - 10);
    write_bytes(dir.file("t_2.bin"), bytes);
    require_bad_input(open, {dir.file("t_2.bin"), "size mismatch"});
  }
  SECTION("a token beyond model.vocab_size") {
    auto bad = good;
    bad[42] = 64;
    write_bytes(dir.file("t_3.bin"), llmc_shard_bytes<uint16_t>(bad, 20240520, 1));
    require_bad_input(open, {dir.file("t_3.bin"), "token 64", "position 42", "model.vocab_size is 64"});
  }
  SECTION("a glob that matches nothing") {
    data.train_path = {dir.file("t_0.bin"), dir.file("shard_*.bin")};
    require_bad_input(open, {dir.file("shard_*.bin"), "matches no file"});
  }
  SECTION("a validation file that is also a training file") {
    data.val_path = {dir.file("t_2.bin")};
    require_bad_input(open, {"data.val_path", dir.file("t_2.bin"), "also a training file"});
  }
  SECTION("the validation tail of several files comes from the last file") {
    // 400 tokens, val_fraction 0.1: 40 tokens from the end of t_3.bin, whose 60 others train.
    const Dataset d = open();
    REQUIRE_THAT(d.describe(), FP8T_CONTAINS("train 360 tokens, val 40 tokens"));
    data.val_fraction = 0.5;  // 200 tokens: more than t_3.bin holds
    require_bad_input(open, {dir.file("t_3.bin"), "the tail comes from the last file alone"});
  }
}
