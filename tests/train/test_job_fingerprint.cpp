// lib/train/job_fingerprint.*: what the ranks of a job compare: every config key and the files
// the config reads, each by size and sampled content.
#include "lib/train/job_fingerprint.h"

#include <fstream>  // std::ofstream
#include <string>   // std::string

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
