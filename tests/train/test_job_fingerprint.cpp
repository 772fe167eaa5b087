// lib/train/job_fingerprint.*: what the ranks of a job compare: every config key and the files
// the config reads, each by size and sampled content.
#include "lib/train/job_fingerprint.h"

#include <filesystem>  // std::filesystem::copy_file
#include <fstream>     // std::ofstream
#include <string>      // std::string

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/config/fields.h"  // config::fields
#include "tests/catch.h"
#include "tests/temp_dir.h"

using namespace fp8t;

namespace {
void write(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}
}  // namespace

TEST_CASE("job fingerprint: the files a config reads, and every key", "[train]") {
  ExperimentConfig c;
  c.data.train_path = {"ignored.bin"};  // the synthetic source reads no file
  REQUIRE(train::input_files(c).empty());
  c.data.source = DataSource::kTokens;
  c.data.train_path = {"a.bin", "b.bin"};  // a key naming several files lists each
  c.data.val_path = {"val.bin"};
  c.model.init_from = "w.safetensors";
  const auto files = train::input_files(c);
  REQUIRE(files.size() == 4);
  REQUIRE(files[0].key == "data.train_path");
  REQUIRE(files[1].path == "b.bin");
  REQUIRE(files[1].key == "data.train_path");
  REQUIRE(files[2].path == "val.bin");
  REQUIRE(files[3].key == "model.init_from");

  const auto items = train::job_fingerprint(c);
  REQUIRE(items.size() == config::fields().size() + 4);
  REQUIRE(items.front().what.rfind("config key ", 0) == 0);
  REQUIRE(items.back().what == "file w.safetensors (model.init_from)");
  REQUIRE(items.back().value == "missing");
}

TEST_CASE("job fingerprint: files that differ in size, head or a sampled block differ; copies do not", "[train]") {
  test::TempDir tmp("fingerprint");
  std::string bytes(1 << 20, 'a');
  for (size_t i = 0; i < bytes.size(); i += 97) bytes[i] = static_cast<char>('a' + i % 23);
  write(tmp / "a.bin", bytes);
  write(tmp / "copy.bin", bytes);
  const std::string a = train::file_fingerprint(tmp / "a.bin");
  REQUIRE(a.rfind("size 1048576 B, head crc32c 0x", 0) == 0);
  REQUIRE(train::file_fingerprint(tmp / "copy.bin") == a);
  std::string head = bytes;
  head[100] ^= 1;
  write(tmp / "head.bin", head);
  write(tmp / "short.bin", bytes.substr(1));
  REQUIRE(train::file_fingerprint(tmp / "head.bin") != a);
  REQUIRE(train::file_fingerprint(tmp / "short.bin") != a);
  // Not every byte is read (a change between two samples goes unseen); one inside a sample is seen.
  const int64_t span = static_cast<int64_t>(bytes.size()) - 4096;
  std::string in_sample = bytes;
  in_sample[static_cast<size_t>(8 * span / 15 + 10)] ^= 1;  // inside sample 8 of 0..15
  write(tmp / "in_sample.bin", in_sample);
  REQUIRE(train::file_fingerprint(tmp / "in_sample.bin") != a);
}

TEST_CASE("data record: what a checkpoint trained on; a replaced, new, removed or reordered file is named", "[train]") {
  test::TempDir tmp("data_record");
  write(tmp / "a.bin", std::string(5000, 'a'));
  write(tmp / "b.bin", std::string(5000, 'b'));
  write(tmp / "c.bin", std::string(5000, 'c'));  // the same size as b.bin: only the content tells them apart
  ExperimentConfig c;
  REQUIRE(train::data_record(c).empty());  // synthetic data: no file
  c.data.source = DataSource::kTokens;
  c.data.train_path = {(tmp / "a.bin").string(), (tmp / "b.bin").string()};
  c.data.val_path = {(tmp / "c.bin").string()};
  c.model.init_from = (tmp / "c.bin").string();  // the starting weights are not data: a resume replaces them
  const nlohmann::json then = train::data_record(c);
  REQUIRE(then.size() == 3);
  REQUIRE(then[1]["key"] == "data.train_path");
  REQUIRE(then[1]["path"] == (tmp / "b.bin").string());
  REQUIRE(then[2]["key"] == "data.val_path");
  REQUIRE(train::data_record_changes(then, train::data_record(c)).empty());

  SECTION("another file of the same size copied over one") {
    std::filesystem::copy_file(tmp / "c.bin", tmp / "b.bin", std::filesystem::copy_options::overwrite_existing);
    const auto changes = train::data_record_changes(then, train::data_record(c));
    REQUIRE(changes.size() == 1);
    CHECK_THAT(changes[0], FP8T_CONTAINS("data.train_path: '" + (tmp / "b.bin").string() + "' holds other data"));
  }
  SECTION("a file added, a file no longer named") {
    c.data.train_path = {(tmp / "b.bin").string(), (tmp / "d.bin").string()};
    write(tmp / "d.bin", "d");
    const auto changes = train::data_record_changes(then, train::data_record(c));
    REQUIRE(changes.size() == 2);
    CHECK_THAT(changes[0], FP8T_CONTAINS("a.bin' is no longer named"));
    CHECK_THAT(changes[1], FP8T_CONTAINS("d.bin' is new"));
  }
  SECTION("the same files in another order") {
    c.data.train_path = {(tmp / "b.bin").string(), (tmp / "a.bin").string()};
    const auto changes = train::data_record_changes(then, train::data_record(c));
    REQUIRE(changes.size() == 1);
    CHECK_THAT(changes[0], FP8T_CONTAINS("in another order"));
  }
}
