#include "lib/data/token_file.h"

#include <cstdint>     // uint16_t, uint32_t
#include <filesystem>  // std::filesystem::resize_file
#include <fstream>     // std::fstream
#include <random>      // std::mt19937
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/data/dataset.h"
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"
#include "tests/data/data_test_files.h"

using fp8t::ParallelLayout;
using fp8t::data::Batch;
using fp8t::data::Dataset;
using fp8t::data::read_token_file;
using fp8t::data::TokenFileFormat;
using fp8t::data::testing::llmc_shard_bytes;
using fp8t::data::testing::nanogpt_bin_bytes;
using fp8t::data::testing::require_bad_input;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::model_of;
using fp8t::data::testing::write_bytes;

namespace {

// count tokens i * stride + offset (mod modulus): distinct neighbours, values up to modulus - 1.
std::vector<uint32_t> token_ramp(size_t count, uint32_t stride, uint32_t modulus, uint32_t offset = 0) {
  std::vector<uint32_t> tokens(count);
  for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<uint32_t>((i * stride + offset) % modulus);
  return tokens;
}

void require_tokens(const fp8t::data::TokenStore& store, const std::vector<uint32_t>& expected) {
  REQUIRE(store.size() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(store.at(i) == static_cast<int64_t>(expected[i]));
}

fp8t::DataSection token_data(const std::string& path) {
  fp8t::DataSection data;
  data.source = fp8t::DataSource::kTokens;
  data.train_path = {path};
  return data;
}

}  // namespace

TEST_CASE("llm.c shard v1 (uint16 tokens) reads correctly", "[data]") {
  ScratchDir dir;
  const auto tokens = token_ramp(3000, 7919, 50257);  // GPT-2 ids, many above 255
  write_bytes(dir.file("s.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240520, 1));
  const auto file = read_token_file(dir.file("s.bin"), "data.train_path");
  REQUIRE(file.format == TokenFileFormat::kLlmcUint16);
  REQUIRE(file.tokens.element_bytes() == 2);
  require_tokens(file.tokens, tokens);
}

TEST_CASE("llm.c shard v7 (uint32 tokens) reads correctly", "[data]") {
  ScratchDir dir;
  const auto tokens = token_ramp(3000, 104729, 128256);  // Llama-3 ids, many above 65535
  write_bytes(dir.file("s.bin"), llmc_shard_bytes<uint32_t>(tokens, 20240801, 7));
  const auto file = read_token_file(dir.file("s.bin"), "data.train_path");
  REQUIRE(file.format == TokenFileFormat::kLlmcUint32);
  REQUIRE(file.tokens.element_bytes() == 4);
  require_tokens(file.tokens, tokens);
  REQUIRE(file.tokens.max_token() > 65535);
}

TEST_CASE("headerless nanoGPT .bin reads as raw uint16", "[data]") {
  ScratchDir dir;
  // Starts with zeros like a header would not: tokens 0 0 0 then a ramp.
  auto tokens = token_ramp(2000, 31, 65, 0);
  tokens[0] = tokens[1] = tokens[2] = 0;
  write_bytes(dir.file("train.bin"), nanogpt_bin_bytes(tokens));
  const auto file = read_token_file(dir.file("train.bin"), "data.train_path");
  REQUIRE(file.format == TokenFileFormat::kNanoGptUint16);
  require_tokens(file.tokens, tokens);
  // Short files (under a header's 1024 bytes) are .bin files too.
  const auto few = token_ramp(40, 3, 65);
  write_bytes(dir.file("few.bin"), nanogpt_bin_bytes(few));
  require_tokens(read_token_file(dir.file("few.bin"), "data.train_path").tokens, few);
}

TEST_CASE("token datasets cut windows from the shard, validation from data.val_path", "[data]") {
  ScratchDir dir;
  // Token i is i (mod 50000): a window's first token identifies its start.
  const auto train = token_ramp(40000, 1, 50000), val = token_ramp(500, 1, 50000, 45000);
  write_bytes(dir.file("train.bin"), llmc_shard_bytes<uint16_t>(train, 20240520, 1));
  write_bytes(dir.file("val.bin"), nanogpt_bin_bytes(val));
  fp8t::DataSection data = token_data(dir.file("train.bin"));
  data.val_path = {dir.file("val.bin")};
  const int64_t seq_len = 32;
  Dataset dataset = Dataset::open(data, model_of(50304, seq_len), 3);
  REQUIRE(dataset.vocab_size_needed() == 45499 + 1);  // the largest id is in val.bin
  REQUIRE_THAT(dataset.describe(), FP8T_CONTAINS("llm.c shard v1"));
  REQUIRE_THAT(dataset.describe(), FP8T_CONTAINS("train 40000 tokens, val 500 tokens"));
  const Batch b = dataset.next_train(8);
  const at::Tensor expected = b.inputs.select(1, 0).unsqueeze(1) + at::arange(seq_len, at::kLong);
  REQUIRE(at::equal(b.inputs, expected));
  REQUIRE(at::equal(b.targets, expected + 1));
  REQUIRE(b.inputs.min().item<int64_t>() >= 0);
  REQUIRE(b.targets.max().item<int64_t>() < 40000);
  const Batch v = dataset.val_batch(0, 2);
  REQUIRE(v.inputs[1][0].item<int64_t>() == 45000 + seq_len);
  REQUIRE(v.targets[1][seq_len - 1].item<int64_t>() == 45000 + 2 * seq_len);

  // Resume and rank sharding on file data.
  Dataset resumed = Dataset::open(data, model_of(50304, seq_len), 3);
  resumed.set_train_position(1);
  const Batch b1 = dataset.next_train(8);
  REQUIRE(at::equal(resumed.next_train(8).inputs, b1.inputs));
  Dataset rank1 = Dataset::open(data, model_of(50304, seq_len), 3, ParallelLayout{.rank = 1, .world_size = 2});
  REQUIRE_FALSE(at::equal(rank1.next_train(8).inputs, b.inputs));
}

TEST_CASE("corrupt token files throw bad-input errors naming the file", "[data]") {
  ScratchDir dir;
  const auto tokens = token_ramp(200, 7, 60);
  const fp8t::ModelSection model = model_of(64, 16);
  auto open_file = [&](const std::string& name) { Dataset::open(token_data(dir.file(name)), model, 1); };

  SECTION("bad magic") {
    write_bytes(dir.file("magic.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240521, 1));
    require_bad_input([&] { open_file("magic.bin"); }, {dir.file("magic.bin"), "bad magic 20240521"});
  }
  SECTION("bad version") {
    write_bytes(dir.file("version.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240520, 7));
    require_bad_input([&] { open_file("version.bin"); },
                      {dir.file("version.bin"), "bad version 7", "expected 1"});
  }
  SECTION("truncated body: size mismatch") {
    // The header claims 210 tokens; the body holds 200.
    write_bytes(dir.file("trunc.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240520, 1, 210));
    require_bad_input([&] { open_file("trunc.bin"); },
                      {dir.file("trunc.bin"), "size mismatch", "1444 bytes", "is 1424 bytes"});
  }
  SECTION("uint32 shard with uint16 body: size mismatch") {
    write_bytes(dir.file("width.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240801, 7));
    require_bad_input([&] { open_file("width.bin"); },
                      {dir.file("width.bin"), "1824 bytes", "is 1424 bytes"});
  }
  SECTION("truncated header") {
    auto bytes = llmc_shard_bytes<uint16_t>(tokens, 20240520, 1);
    bytes.resize(500);
    write_bytes(dir.file("header.bin"), bytes);
    require_bad_input([&] { open_file("header.bin"); }, {dir.file("header.bin"), "1024"});
  }
  SECTION("odd-sized .bin") {
    auto bytes = nanogpt_bin_bytes(tokens);
    bytes.push_back(1);
    write_bytes(dir.file("odd.bin"), bytes);
    require_bad_input([&] { open_file("odd.bin"); }, {dir.file("odd.bin"), "odd", "401"});
  }
  SECTION("file shorter than seq_len + 1 tokens") {
    write_bytes(dir.file("short.bin"), nanogpt_bin_bytes(token_ramp(16, 1, 60)));
    require_bad_input([&] { open_file("short.bin"); }, {dir.file("short.bin"), "holds 16 tokens", "17"});
  }
  SECTION("token beyond the vocabulary") {
    auto bad = tokens;
    bad[150] = 70;
    write_bytes(dir.file("vocab.bin"), llmc_shard_bytes<uint16_t>(bad, 20240520, 1));
    require_bad_input([&] { open_file("vocab.bin"); },
                      {dir.file("vocab.bin"), "token 70", "position 150", "model.vocab_size is 64"});
  }
  SECTION("token beyond the vocabulary in the validation file") {
    write_bytes(dir.file("train.bin"), nanogpt_bin_bytes(tokens));
    auto bad = tokens;
    bad[3] = 64;
    write_bytes(dir.file("val.bin"), nanogpt_bin_bytes(bad));
    fp8t::DataSection data = token_data(dir.file("train.bin"));
    data.val_path = {dir.file("val.bin")};
    require_bad_input([&] { Dataset::open(data, model, 1); },
                      {dir.file("val.bin"), "data.val_path", "token 64", "model.vocab_size"});
  }
  SECTION("missing file") {
    require_bad_input([&] { open_file("missing.bin"); }, {dir.file("missing.bin"), "data.train_path"});
  }
  SECTION("empty file") {
    write_bytes(dir.file("empty.bin"), {});
    require_bad_input([&] { open_file("empty.bin"); }, {dir.file("empty.bin"), "empty"});
  }
  SECTION("a good file opens") {
    write_bytes(dir.file("good.bin"), llmc_shard_bytes<uint16_t>(tokens, 20240520, 1));
    REQUIRE_NOTHROW(open_file("good.bin"));
  }
}

TEST_CASE("token files are read on demand; the largest token skips the holes of sparse files", "[data]") {
  ScratchDir dir;
  const std::string path = dir.file("sparse.bin");
  // A 64 MiB llm.c v7 shard that is a hole except for its header, one token in the middle and
  // the last token: the scan reads only those extents and still finds both.
  const int64_t count = int64_t{16} << 20;
  write_bytes(path, llmc_shard_bytes<uint32_t>({}, 20240801, 7, count));
  std::filesystem::resize_file(path, 1024 + count * 4);
  auto poke = [&](int64_t index, uint32_t token) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + index * 4);
    f.write(reinterpret_cast<const char*>(&token), 4);
  };
  poke(count / 2 + 3, 70000);
  poke(count - 1, 123);
  const auto file = read_token_file(path, "data.train_path");
  REQUIRE(file.tokens.file_backed());
  REQUIRE(file.tokens.size() == count);
  CHECK(file.tokens.max_token() == 70000);
  CHECK(file.tokens.find_first_at_least(1000) == count / 2 + 3);
  CHECK(file.tokens.at(count - 1) == 123);
  CHECK(file.tokens.at(0) == 0);
  std::vector<int64_t> window(4);
  file.tokens.copy_to(count / 2 + 1, 4, window.data());
  CHECK(window == std::vector<int64_t>{0, 0, 70000, 0});
}

TEST_CASE("seeded random mutations of token files are read or refused, never crash", "[data]") {
  // The CI variant of the data-file fuzz target: headers and sizes mangled at random.
  ScratchDir dir;
  const auto tokens = token_ramp(300, 7919, 50257);
  const std::vector<std::vector<char>> seeds = {llmc_shard_bytes<uint16_t>(tokens, 20240520, 1),
                                                llmc_shard_bytes<uint32_t>(tokens, 20240801, 7),
                                                nanogpt_bin_bytes(tokens)};
  std::mt19937 rng(1130);
  int read = 0, refused = 0;
  for (int i = 0; i < 600; ++i) {
    std::vector<char> bytes = seeds[i % seeds.size()];
    for (int e = 0, n = 1 + static_cast<int>(rng() % 4); e < n; ++e) {
      const size_t at = rng() % std::max<size_t>(bytes.size(), 1);
      switch (rng() % 4) {
        case 0: if (!bytes.empty()) bytes[std::min(at, size_t{1023} % bytes.size())] = static_cast<char>(rng()); break;
        case 1: bytes.resize(at); break;
        case 2: bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(rng())); break;
        default: if (!bytes.empty()) bytes[at] = static_cast<char>(rng()); break;
      }
    }
    write_bytes(dir.file("m.bin"), bytes);
    try {
      const auto file = read_token_file(dir.file("m.bin"), "data.train_path");
      if (file.tokens.size() > 0) (void)file.tokens.at(file.tokens.size() - 1);  // the file holds it
      ++read;
    } catch (const fp8t::Error& e) {
      REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
      ++refused;
    }
  }
  CHECK(read > 0);
  CHECK(refused > 0);
}
