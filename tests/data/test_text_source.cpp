#include <cstdint>  // uint8_t
#include <string>   // std::string

#include "lib/data/dataset.h"
#include "lib/data/text_source.h"
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"
#include "tests/data/data_test_files.h"

using fp8t::ParallelLayout;
using fp8t::data::Batch;
using fp8t::data::Dataset;
using fp8t::data::testing::require_bad_input;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::write_text;

namespace {

// Pseudo-random bytes (all 256 values occur): any 8-byte window is unique with overwhelming
// probability, so a batch row identifies its start offset.
std::string random_text(size_t n, uint32_t seed) {
  std::string text(n, '\0');
  uint32_t state = seed;
  for (char& c : text) {
    state = state * 1664525u + 1013904223u;  // Numerical Recipes LCG
    c = static_cast<char>(state >> 24);
  }
  return text;
}

fp8t::DataSection text_data(const std::string& path) {
  fp8t::DataSection data;
  data.source = fp8t::DataSource::kText;
  if (!path.empty()) data.train_path = {path};
  return data;
}

fp8t::ModelSection byte_model(int64_t seq_len) {
  fp8t::ModelSection model;
  model.vocab_size = 256;
  model.seq_len = seq_len;
  return model;
}

std::string row_bytes(const at::Tensor& batch, int64_t row) {
  std::string out;
  const at::Tensor r = batch[row];
  for (int64_t t = 0; t < r.size(0); ++t) out.push_back(static_cast<char>(r[t].item<int64_t>()));
  return out;
}

}  // namespace

TEST_CASE("text files are read byte for byte", "[data]") {
  ScratchDir dir;
  const std::string text =
      "Happy families are all alike; every unhappy family is unhappy in its own way.\n\xe9\xff";
  write_text(dir.file("a.txt"), text);
  const fp8t::data::TokenStore store = fp8t::data::read_text_file(dir.file("a.txt"), "data.train_path");
  REQUIRE(store.size() == static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) REQUIRE(store.at(i) == static_cast<uint8_t>(text[i]));
  REQUIRE(store.max_token() == 0xff);
}

TEST_CASE("text training windows are substrings of the training part, targets shifted", "[data]") {
  ScratchDir dir;
  const std::string text = random_text(1000, 1);
  write_text(dir.file("t.txt"), text);
  fp8t::DataSection data = text_data(dir.file("t.txt"));
  data.val_fraction = 0.1;  // val = last 100 bytes
  const int64_t seq_len = 8;
  Dataset dataset = Dataset::open(data, byte_model(seq_len), 7);
  REQUIRE_THAT(dataset.describe(), FP8T_CONTAINS("train 900 tokens, val 100 tokens"));
  REQUIRE_THAT(dataset.describe(), FP8T_CONTAINS(dir.file("t.txt")));
  REQUIRE(dataset.entropy_floor_nats() == std::nullopt);
  int64_t min_start = 1000, max_start = -1;
  for (int i = 0; i < 20; ++i) {
    const Batch b = dataset.next_train(8);
    for (int64_t row = 0; row < 8; ++row) {
      const std::string in = row_bytes(b.inputs, row), tg = row_bytes(b.targets, row);
      const size_t start = text.find(in);
      REQUIRE(start != std::string::npos);
      REQUIRE(tg == text.substr(start + 1, seq_len));
      REQUIRE(start + seq_len + 1 <= 900);  // the target never reaches into the validation tail
      min_start = std::min<int64_t>(min_start, start);
      max_start = std::max<int64_t>(max_start, start);
    }
  }
  // 160 random starts over 892 offsets spread over the training part.
  REQUIRE(min_start < 100);
  REQUIRE(max_start > 790);
}

TEST_CASE("text validation is the contiguous tail, cut into consecutive windows", "[data]") {
  ScratchDir dir;
  const std::string text = random_text(1000, 2);
  write_text(dir.file("t.txt"), text);
  const int64_t seq_len = 8;
  const Dataset dataset = Dataset::open(text_data(dir.file("t.txt")), byte_model(seq_len), 7);
  // 100 val bytes hold (100 - 1) / 8 = 12 windows; batch 0 of 12 rows covers them in order.
  const Batch v = dataset.val_batch(0, 12);
  for (int64_t row = 0; row < 12; ++row) {
    REQUIRE(row_bytes(v.inputs, row) == text.substr(900 + row * seq_len, seq_len));
    REQUIRE(row_bytes(v.targets, row) == text.substr(901 + row * seq_len, seq_len));
  }
  // The next batch wraps around to the first window; the windows do not depend on the seed.
  const Batch wrapped = dataset.val_batch(1, 12);
  REQUIRE(at::equal(wrapped.inputs, v.inputs));
  const Dataset other_seed = Dataset::open(text_data(dir.file("t.txt")), byte_model(seq_len), 8);
  REQUIRE(at::equal(other_seed.val_batch(0, 12).inputs, v.inputs));
  // Two ranks of 3 rows evaluate the rows one rank of 6 rows evaluates.
  const Batch whole = dataset.val_batch(1, 6);
  const Batch r0 = Dataset::open(text_data(dir.file("t.txt")), byte_model(seq_len), 7,
                                 ParallelLayout{.rank = 0, .world_size = 2}).val_batch(1, 3);
  const Batch r1 = Dataset::open(text_data(dir.file("t.txt")), byte_model(seq_len), 7,
                                 ParallelLayout{.rank = 1, .world_size = 2}).val_batch(1, 3);
  REQUIRE(at::equal(at::cat({r0.inputs, r1.inputs}), whole.inputs));
  REQUIRE(row_bytes(whole.inputs, 0) == text.substr(900 + 6 * seq_len, seq_len));
}

TEST_CASE("text validation comes from data.val_path when it is set", "[data]") {
  ScratchDir dir;
  const std::string train = random_text(500, 3), val = random_text(50, 4);
  write_text(dir.file("train.txt"), train);
  write_text(dir.file("val.txt"), val);
  fp8t::DataSection data = text_data(dir.file("train.txt"));
  data.val_path = {dir.file("val.txt")};
  const Dataset dataset = Dataset::open(data, byte_model(8), 1);
  REQUIRE_THAT(dataset.describe(), FP8T_CONTAINS("train 500 tokens, val 50 tokens"));
  REQUIRE(row_bytes(dataset.val_batch(0, 2).inputs, 1) == val.substr(8, 8));
}

TEST_CASE("text source rejects bad settings and files with exit code 2", "[data]") {
  ScratchDir dir;
  write_text(dir.file("short.txt"), "0123456789");  // 10 bytes
  write_text(dir.file("empty.txt"), "");
  write_text(dir.file("ok.txt"), random_text(1000, 5));

  SECTION("model.vocab_size below 256") {
    fp8t::ModelSection model = byte_model(8);
    model.vocab_size = 64;
    require_bad_input([&] { Dataset::open(text_data(dir.file("ok.txt")), model, 1); },
                      {"model.vocab_size", "256"});
  }
  SECTION("missing train file") {
    const std::string missing = dir.file("nope.txt");
    require_bad_input([&] { Dataset::open(text_data(missing), byte_model(8), 1); },
                      {missing, "data.train_path"});
  }
  SECTION("missing val file") {
    fp8t::DataSection data = text_data(dir.file("ok.txt"));
    data.val_path = {dir.file("nope_val.txt")};
    require_bad_input([&] { Dataset::open(data, byte_model(8), 1); }, {data.val_path[0], "data.val_path"});
  }
  SECTION("no train path") {
    require_bad_input([&] { Dataset::open(text_data(""), byte_model(8), 1); }, {"data.train_path"});
  }
  SECTION("empty file") {
    require_bad_input([&] { Dataset::open(text_data(dir.file("empty.txt")), byte_model(8), 1); },
                      {dir.file("empty.txt"), "empty"});
  }
  SECTION("file shorter than seq_len + 1") {
    require_bad_input([&] { Dataset::open(text_data(dir.file("short.txt")), byte_model(10), 1); },
                      {dir.file("short.txt"), "holds 10 tokens", "11"});
  }
  SECTION("validation tail shorter than seq_len + 1") {
    require_bad_input([&] { Dataset::open(text_data(dir.file("ok.txt")), byte_model(128), 1); },
                      {"data.val_fraction", "129"});
  }
  SECTION("val_fraction 0 without val_path") {
    fp8t::DataSection data = text_data(dir.file("ok.txt"));
    data.val_fraction = 0.0;
    require_bad_input([&] { Dataset::open(data, byte_model(8), 1); }, {"data.val_fraction"});
  }
}
