// lib/data/shard_manifest.*: token files against prepare_data.py's manifest.json, through
// load_data_files (what a run opens): a file the manifest does not list, or one of another
// token count, is exit 2 naming it and the manifest; shards of the split that the key leaves
// out, a validation shard trained on, and a pattern over a folder without manifest are warned
// about; a user's own token file without a manifest loads without a word.
#include "lib/data/shard_manifest.h"

#include <cstdint>     // uint32_t
#include <filesystem>  // std::filesystem::copy_file, remove
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/data/shard_set.h"  // load_data_files
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"
#include "tests/data/data_test_files.h"

using fp8t::DataSource;
using fp8t::data::load_data_files;
using fp8t::data::LoadedFiles;
using fp8t::data::testing::llmc_shard_bytes;
using fp8t::data::testing::model_of;
using fp8t::data::testing::require_bad_input;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::write_bytes;
using fp8t::data::testing::write_text;

namespace {

// A folder as prepare_data.py leaves it: data_val_000000.bin (40 tokens), data_train_00000{1,2,3}.bin
// (50 tokens each) and manifest.json listing them.
void prepared_folder(const ScratchDir& dir) {
  write_bytes(dir.file("data_val_000000.bin"), llmc_shard_bytes<uint16_t>(std::vector<uint32_t>(40, 3), 20240520, 1));
  for (int i = 1; i <= 3; ++i) {
    write_bytes(dir.file("data_train_00000" + std::to_string(i) + ".bin"),
                llmc_shard_bytes<uint16_t>(std::vector<uint32_t>(50, i), 20240520, 1));
  }
  write_text(dir.file("manifest.json"), R"json({"format": "llm.c shard v1 (uint16)", "vocab_size": 64, "shards": [
    {"file": "data_val_000000.bin", "split": "val", "tokens": 40, "documents": 1},
    {"file": "data_train_000001.bin", "split": "train", "tokens": 50, "documents": 1},
    {"file": "data_train_000002.bin", "split": "train", "tokens": 50, "documents": 1},
    {"file": "data_train_000003.bin", "split": "train", "tokens": 50, "documents": 1}]})json");
}

LoadedFiles load(const std::vector<std::string>& entries, const std::string& key = "data.train_path") {
  return load_data_files(DataSource::kTokens, entries, key, model_of(64, 8));
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("shard manifest: the files it lists load without a warning", "[data]") {
  ScratchDir dir;
  prepared_folder(dir);
  const LoadedFiles train = load({dir.file("data_train_*.bin")});
  REQUIRE(train.spans.size() == 3);
  CHECK(train.warnings.empty());
  CHECK(load({dir.file("data_val_000000.bin")}, "data.val_path").warnings.empty());
}

TEST_CASE("shard manifest: a file it does not list, or of another length, is exit 2", "[data]") {
  ScratchDir dir;
  prepared_folder(dir);
  SECTION("a shard left from another preparation") {
    write_bytes(dir.file("data_train_000004.bin"), llmc_shard_bytes<uint16_t>(std::vector<uint32_t>(50, 7), 20240520, 1));
    require_bad_input([&] { load({dir.file("data_train_*.bin")}); },
                      {"data.train_path", dir.file("data_train_000004.bin"), "is not listed in",
                       dir.file("manifest.json")});
  }
  SECTION("a shard rewritten with another token count") {
    write_bytes(dir.file("data_train_000002.bin"), llmc_shard_bytes<uint16_t>(std::vector<uint32_t>(60, 2), 20240520, 1));
    require_bad_input([&] { load({dir.file("data_train_*.bin")}); },
                      {dir.file("data_train_000002.bin"), "holds 60 tokens", "lists it with 50"});
  }
}

TEST_CASE("shard manifest: a subset, a validation shard trained on, no manifest: warnings", "[data]") {
  ScratchDir dir;
  prepared_folder(dir);
  SECTION("a shard missing from the folder: the pattern silently matches fewer") {
    std::filesystem::remove(dir.file("data_train_000003.bin"));
    const LoadedFiles train = load({dir.file("data_train_*.bin")});
    REQUIRE(train.warnings.size() == 1);
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("trains on 2 of the 3 train shards"));
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("missing from the folder: data_train_000003.bin"));
  }
  SECTION("a shard present but not named") {
    const LoadedFiles train = load({dir.file("data_train_000001.bin")});
    REQUIRE(train.warnings.size() == 1);
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("not named by data.train_path: data_train_000002.bin, "
                                                "data_train_000003.bin"));
  }
  SECTION("the validation shard among the training files") {
    const LoadedFiles train = load({dir.file("data_*.bin")});
    REQUIRE(train.warnings.size() == 1);
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("is a val shard in"));
  }
  SECTION("a pattern over a folder without manifest.json") {
    std::filesystem::remove(dir.file("manifest.json"));
    const LoadedFiles train = load({dir.file("data_train_*.bin")});
    REQUIRE(train.warnings.size() == 1);
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("3 token file(s) in"));
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("no manifest.json"));
    INFO(joined(train.warnings));
    // A file named by itself (a user's own token file) without a manifest: nothing to say.
    CHECK(load({dir.file("data_train_000001.bin")}).warnings.empty());
  }
  SECTION("a manifest.json of another tool is ignored with a warning") {
    write_text(dir.file("manifest.json"), R"({"files": ["a", "b"]})");
    const LoadedFiles train = load({dir.file("data_train_000001.bin")});
    REQUIRE(train.warnings.size() == 1);
    CHECK_THAT(train.warnings[0], FP8T_CONTAINS("is not a manifest of scripts/prepare_data.py"));
  }
}

TEST_CASE("shard manifest: text files are not checked", "[data]") {
  ScratchDir dir;
  prepared_folder(dir);
  write_text(dir.file("notes.txt"), std::string(100, 'a'));
  const LoadedFiles text = load_data_files(DataSource::kText, {dir.file("notes.txt")}, "data.train_path",
                                           model_of(256, 8));
  CHECK(text.warnings.empty());
}
