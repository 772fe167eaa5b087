// lib/data/token_manifest.*: the manifest.json of scripts/prepare_data.py beside token files.
#include "lib/data/token_manifest.h"

#include <fstream>  // std::ofstream

#include "tests/catch.h"
#include "tests/data/data_test_checks.h"  // require_bad_input
#include "tests/temp_dir.h"               // TempDir

using namespace fp8t;
using fp8t::data::testing::require_bad_input;

namespace {

void write(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("token_manifest: prepare_data.py's manifest is read; none or another tool's gives nothing", "[data]") {
  test::TempDir dir("manifest");
  const std::filesystem::path shard = dir / "shard_000000.bin";
  CHECK_FALSE(data::manifest_beside(shard).has_value());  // no manifest.json
  write(dir / "manifest.json", R"({"name": "not ours"})");
  CHECK_FALSE(data::manifest_beside(shard).has_value());
  write(dir / "manifest.json", R"J({"format": "llm.c shard v1 (uint16)", "tokenizer": ["/t/vocab.json", "/t/merges.txt"],
    "vocab_size": 50257, "separator": {"token": "<|endoftext|>", "id": 50256}, "shards": []})J");
  const auto m = data::manifest_beside(shard);
  REQUIRE(m.has_value());
  CHECK(m->vocab_size == 50257);
  CHECK(m->separator_id == 50256);
  CHECK(m->tokenizer == "/t/vocab.json + /t/merges.txt");
  CHECK(m->path == dir / "manifest.json");
  // One folder once, whatever the number of files in it.
  CHECK(data::manifests_beside({shard.string(), (dir / "shard_000001.bin").string()}).size() == 1);
}

TEST_CASE("token_manifest: a manifest of ours with a bad vocab_size is bad input naming it", "[data]") {
  test::TempDir dir("manifest_bad");
  write(dir / "manifest.json", R"({"vocab_size": "big", "shards": []})");
  require_bad_input([&] { data::manifest_beside(dir / "a.bin"); }, {"manifest.json", "vocab_size"});
}
