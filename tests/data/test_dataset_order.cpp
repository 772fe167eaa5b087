// data.order: the random order (windows drawn with replacement, the rule of counter_rng.h keys)
// and the sequential order (a keyed shuffle of the non-overlapping windows of all training
// files, every window once per epoch), on several token files.
#include <cstdint>  // int64_t, uint16_t, uint32_t
#include <map>      // std::map
#include <set>      // std::set
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/data/counter_rng.h"
#include "lib/data/dataset.h"
#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/data/data_test_files.h"

using fp8t::ParallelLayout;
using fp8t::data::Batch;
using fp8t::data::Dataset;
using fp8t::data::testing::llmc_shard_bytes;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::write_bytes;

namespace {

constexpr int64_t kSeqLen = 8;
constexpr uint32_t kFileStride = 10000;  // token of file f at offset i: f * 10000 + i
// Three shards of 83, 120 and 57 tokens: (n - 1) / 8 = 10 + 14 + 7 = 31 windows, and tails.
const std::vector<int64_t> kSizes = {83, 120, 57};
constexpr int64_t kWindows = 31;

using Window = std::pair<int64_t, int64_t>;  // (file, offset)

// Token files whose every token names its file and offset, and a separate validation file.
struct ThreeShards {
  ScratchDir dir;
  fp8t::DataSection data;
  ThreeShards() {
    for (size_t f = 0; f < kSizes.size(); ++f) {
      std::vector<uint32_t> tokens(kSizes[f]);
      for (int64_t i = 0; i < kSizes[f]; ++i) tokens[i] = static_cast<uint32_t>(f * kFileStride + i);
      const std::string path = dir.file("train_" + std::to_string(f) + ".bin");
      write_bytes(path, llmc_shard_bytes<uint16_t>(tokens, 20240520, 1));
    }
    write_bytes(dir.file("val.bin"), llmc_shard_bytes<uint16_t>(std::vector<uint32_t>(40, 3), 20240520, 1));
    data.source = fp8t::DataSource::kTokens;
    data.train_path = {dir.file("train_*.bin")};
    data.val_path = {dir.file("val.bin")};
  }
  Dataset open(fp8t::DataOrder order, int rank = 0, int world = 1, uint64_t seed = 5) const {
    fp8t::DataSection d = data;
    d.order = order;
    fp8t::ModelSection model;
    model.vocab_size = 40000;
    model.seq_len = kSeqLen;
    return Dataset::open(d, model, seed, ParallelLayout{.rank = rank, .world_size = world});
  }
};

// The (file, offset) of every row, checking that each row is that window and its shift.
std::vector<Window> windows_of(const Batch& b) {
  std::vector<Window> out;
  for (int64_t row = 0; row < b.inputs.size(0); ++row) {
    const int64_t first = b.inputs[row][0].item<int64_t>();
    const at::Tensor expected = first + at::arange(kSeqLen, at::kLong);
    REQUIRE(at::equal(b.inputs[row], expected));
    REQUIRE(at::equal(b.targets[row], expected + 1));
    out.emplace_back(first / kFileStride, first % kFileStride);
  }
  return out;
}

// The stream of windows of `calls` batches of `rows` rows.
std::vector<Window> draw(Dataset& d, int calls, int64_t rows) {
  std::vector<Window> out;
  for (int i = 0; i < calls; ++i) {
    const std::vector<Window> w = windows_of(d.next_train(rows));
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

}  // namespace

TEST_CASE("sequential order uses every window of every file exactly once per epoch", "[data]") {
  const ThreeShards shards;
  Dataset d = shards.open(fp8t::DataOrder::kSequential);
  REQUIRE(d.tokens_per_epoch() == kWindows * kSeqLen);
  REQUIRE(d.train_tokens() == 83 + 120 + 57);
  REQUIRE(d.train_files() == 3);
  REQUIRE_THAT(d.describe(), FP8T_CONTAINS("3 files"));
  REQUIRE_THAT(d.describe(), FP8T_CONTAINS("order sequential (31 windows of 8 per epoch)"));
  // 5 rows per call do not divide 31 windows: epochs end inside a batch. 19 calls = 95 rows, three epochs.
  const std::vector<Window> stream = draw(d, 19, 5);
  REQUIRE(d.windows_drawn() == 95);
  REQUIRE(d.tokens_seen() == 95 * kSeqLen);
  REQUIRE(*d.epoch() == 95.0 / 31.0);
  std::set<Window> all;
  for (size_t f = 0; f < kSizes.size(); ++f) {
    for (int64_t w = 0; w < (kSizes[f] - 1) / kSeqLen; ++w) all.insert({f, w * kSeqLen});
  }
  REQUIRE(all.size() == kWindows);
  std::vector<std::vector<Window>> epochs(3);
  for (size_t s = 0; s < 3 * kWindows; ++s) epochs[s / kWindows].push_back(stream[s]);
  for (const auto& epoch : epochs) {
    REQUIRE(std::set<Window>(epoch.begin(), epoch.end()) == all);  // 31 draws, 31 distinct: each once
  }
  // A new shuffle every epoch, and not the files' order.
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);
  CHECK(epochs[0] != std::vector<Window>(all.begin(), all.end()));
  // The seed picks the order.
  Dataset other = shards.open(fp8t::DataOrder::kSequential, 0, 1, 6);
  CHECK(draw(other, 7, 5) != std::vector<Window>(stream.begin(), stream.begin() + 35));
}

TEST_CASE("sequential order: two ranks of B rows draw one process's 2B rows, disjoint", "[data]") {
  const ThreeShards shards;
  Dataset whole = shards.open(fp8t::DataOrder::kSequential);
  Dataset r0 = shards.open(fp8t::DataOrder::kSequential, 0, 2), r1 = shards.open(fp8t::DataOrder::kSequential, 1, 2);
  std::vector<Window> seen0, seen1;
  for (int call = 0; call < 5; ++call) {  // 5 x 6 = 30 rows: within the first epoch
    const Batch w = whole.next_train(6), a = r0.next_train(3), b = r1.next_train(3);
    REQUIRE(at::equal(at::cat({a.inputs, b.inputs}), w.inputs));
    REQUIRE(at::equal(at::cat({a.targets, b.targets}), w.targets));
    for (const Window& x : windows_of(a)) seen0.push_back(x);
    for (const Window& x : windows_of(b)) seen1.push_back(x);
  }
  REQUIRE(r0.windows_drawn() == 30);  // each rank counts the windows of all ranks
  std::set<Window> both(seen0.begin(), seen0.end());
  both.insert(seen1.begin(), seen1.end());
  REQUIRE(both.size() == 30);  // 15 + 15 windows, none shared and none repeated
}

TEST_CASE("sequential order resumes exactly from the saved position, also with another batch size", "[data]") {
  const ThreeShards shards;
  Dataset original = shards.open(fp8t::DataOrder::kSequential);
  const std::vector<Window> first = draw(original, 4, 4);  // 16 windows
  const std::vector<Window> then = draw(original, 3, 4);   // 12 more, over the epoch boundary at 31
  Dataset resumed = shards.open(fp8t::DataOrder::kSequential);
  resumed.set_train_position(4);
  resumed.set_windows_drawn(16);
  REQUIRE(draw(resumed, 3, 4) == then);
  REQUIRE(resumed.train_position() == original.train_position());
  REQUIRE(resumed.windows_drawn() == original.windows_drawn());
  // Another batch size continues at the same window: 2 calls of 6 rows = the 12 windows of 3 x 4.
  Dataset wider = shards.open(fp8t::DataOrder::kSequential);
  wider.set_windows_drawn(16);
  REQUIRE(draw(wider, 2, 6) == then);
}

TEST_CASE("random order is the documented key rule over all files' window starts", "[data]") {
  // data.order random as it always was: row g of call p starts at start number
  // SplitMix64(hash_key(seed, train, 0, p, g)).below(starts), starts counted file after file
  // (n - seq_len per file); for one file that is the single-file rule of earlier versions.
  using fp8t::data::hash_key;
  using fp8t::data::SplitMix64;
  const ThreeShards shards;
  Dataset d = shards.open(fp8t::DataOrder::kRandom, 1, 2, 5);
  const uint64_t starts = (83 - 8) + (120 - 8) + (57 - 8);
  for (uint64_t p = 0; p < 4; ++p) {
    const std::vector<Window> got = windows_of(d.next_train(3));
    for (uint64_t r = 0; r < 3; ++r) {
      const uint64_t g = 1 * 3 + r;  // rank 1 of 2, 3 rows each
      int64_t u = static_cast<int64_t>(SplitMix64(hash_key({5, 2, 0, p, g})).below(starts));
      int64_t file = 0;
      while (u >= kSizes[file] - kSeqLen) u -= kSizes[file++] - kSeqLen;
      REQUIRE(got[r] == Window{file, u});
    }
  }
  REQUIRE(d.windows_drawn() == 4 * 6);
}

TEST_CASE("random order on one file draws the starts of the single-file rule", "[data]") {
  using fp8t::data::hash_key;
  using fp8t::data::SplitMix64;
  ScratchDir dir;
  std::vector<uint32_t> tokens(300);
  for (int64_t i = 0; i < 300; ++i) tokens[i] = static_cast<uint32_t>(i);
  write_bytes(dir.file("one.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240520, 1));
  fp8t::DataSection data;
  data.source = fp8t::DataSource::kTokens;
  data.train_path = {dir.file("one.bin")};  // val: the last 10% (30 tokens), train 270
  fp8t::ModelSection model;
  model.vocab_size = 512;
  model.seq_len = kSeqLen;
  Dataset d = Dataset::open(data, model, 9);
  for (uint64_t p = 0; p < 3; ++p) {
    const Batch b = d.next_train(4);
    for (uint64_t r = 0; r < 4; ++r) {
      const int64_t start = static_cast<int64_t>(SplitMix64(hash_key({9, 2, 0, p, r})).below(270 - kSeqLen));
      REQUIRE(b.inputs[r][0].item<int64_t>() == start);
    }
  }
  REQUIRE(d.epoch().has_value());
  REQUIRE(d.tokens_per_epoch() == (270 - 1) / kSeqLen * kSeqLen);
}

TEST_CASE("validation over several files walks their non-overlapping windows in order", "[data]") {
  const ThreeShards shards;
  fp8t::DataSection data = shards.data;
  data.val_path = {shards.dir.file("train_1.bin"), shards.dir.file("train_2.bin")};
  data.train_path = {shards.dir.file("train_0.bin")};
  fp8t::ModelSection model;
  model.vocab_size = 40000;
  model.seq_len = kSeqLen;
  const Dataset d = Dataset::open(data, model, 1);
  // 14 windows of train_1, then 7 of train_2: batch 0 of 21 rows covers them once, in order.
  std::vector<Window> expected;
  for (int64_t w = 0; w < 14; ++w) expected.push_back({1, w * kSeqLen});
  for (int64_t w = 0; w < 7; ++w) expected.push_back({2, w * kSeqLen});
  REQUIRE(windows_of(d.val_batch(0, 21)) == expected);
}

TEST_CASE("synthetic data has no epochs and refuses the sequential order", "[data]") {
  fp8t::ModelSection model;
  model.vocab_size = 64;
  model.seq_len = 16;
  Dataset d = Dataset::open(fp8t::DataSection{}, model, 1);
  d.next_train(4);
  REQUIRE_FALSE(d.epoch().has_value());
  REQUIRE(d.tokens_seen() == 4 * 16);
  fp8t::DataSection sequential;
  sequential.order = fp8t::DataOrder::kSequential;
  try {
    Dataset::open(sequential, model, 1);
    FAIL("no error for data.order sequential on synthetic data");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("data.order"));
  }
}
