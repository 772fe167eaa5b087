// lib/model/safetensors.*
#include "lib/model/safetensors.h"

#include <torch/torch.h>  // torch::randn

#include <fstream>  // std::ifstream, std::ofstream
#include <nlohmann/json.hpp>

#include "tests/catch.h"
#include "tests/data/data_test_checks.h"  // require_bad_input
#include "tests/temp_dir.h"               // TempDir

using namespace fp8t;
using fp8t::data::testing::require_bad_input;

namespace {

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// A file of one header (as given) and `data_bytes` zero bytes.
std::string file_with(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + std::string(data_bytes, '\0');
}

}  // namespace

TEST_CASE("safetensors: tensors and metadata round-trip bit for bit", "[model]") {
  test::TempDir dir("safetensors");
  torch::manual_seed(1);
  const model::NamedTensors in = {{"b.weight", torch::randn({3, 5})},
                                  {"a.bf16", torch::randn({4}).to(at::kBFloat16)},
                                  {"tokens", torch::arange(7, at::kLong).view({1, 7})},
                                  {"scalar", torch::tensor(2.5)},
                                  {"empty", torch::empty({0, 3})}};
  model::write_safetensors(dir / "m.safetensors", in, {{"format", "pt"}});
  const auto out = model::read_safetensors(dir / "m.safetensors");
  REQUIRE(out.tensors.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    const at::Tensor& r = out.tensors.at(name);
    CHECK(r.scalar_type() == t.scalar_type());
    CHECK(r.sizes() == t.sizes());
    CHECK(at::equal(r, t));
  }
  CHECK(out.metadata.at("format") == "pt");
  CHECK(test::TempDir::list(dir.path()) == std::vector<std::string>{"m.safetensors"});  // no temporary left
}

TEST_CASE("safetensors: the layout other readers expect", "[model]") {
  test::TempDir dir("safetensors");
  model::write_safetensors(dir / "m.safetensors", {{"w", torch::ones({2, 3})}, {"v", torch::zeros({4}, at::kBFloat16)}});
  const std::string bytes = read_bytes(dir / "m.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  CHECK(n % 8 == 0);  // data 8-byte aligned
  REQUIRE(bytes.size() == 8 + n + 2 * 3 * 4 + 4 * 2);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["w"]["dtype"] == "F32");
  CHECK(header["w"]["shape"] == nlohmann::json({2, 3}));
  CHECK(header["v"]["dtype"] == "BF16");
  // Offsets tile the data in name order: "v" (8 bytes) then "w" (24 bytes).
  CHECK(header["v"]["data_offsets"] == nlohmann::json({0, 8}));
  CHECK(header["w"]["data_offsets"] == nlohmann::json({8, 32}));
  // 1.0f little endian at the start of w.
  CHECK(bytes.substr(8 + n + 8, 4) == std::string("\x00\x00\x80\x3f", 4));
}

TEST_CASE("safetensors: malformed files are bad input naming the file and tensor", "[model]") {
  test::TempDir dir("safetensors");
  const auto p = dir / "bad.safetensors";
  auto read = [&] { model::read_safetensors(p); };
  require_bad_input(read, {p.string(), "does not exist"});
  write_bytes(p, "abc");
  require_bad_input(read, {"not a safetensors file"});
  write_bytes(p, file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4));
  require_bad_input(read, {"cover 8 bytes but the data is 4 bytes", "truncated"});
  std::string s = file_with("{}", 0);
  s[0] = 100;  // header length beyond the file
  write_bytes(p, s);
  require_bad_input(read, {"header length 100"});
  write_bytes(p, file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4));
  require_bad_input(read, {"'w'", "data_offsets [0, 4] for 8 bytes"});
  write_bytes(p, file_with("{\"w\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2));
  require_bad_input(read, {"'w'", "dtype 'Q7'"});
  write_bytes(p, file_with("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                           "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3));
  require_bad_input(read, {"'b'", "overlap"});
  write_bytes(p, file_with("[1, 2]", 0));
  require_bad_input(read, {"not an object"});
}

TEST_CASE("safetensors: the metadata alone, without reading a tensor", "[model]") {
  test::TempDir dir("safetensors_meta");
  const auto p = dir / "m.safetensors";
  model::write_safetensors(p, {{"w", torch::ones({2, 3})}}, {{"fp8train_step", "42"}, {"format", "pt"}});
  const auto meta = model::read_safetensors_metadata(p);
  CHECK(meta == std::map<std::string, std::string>{{"fp8train_step", "42"}, {"format", "pt"}});
  CHECK(meta == model::read_safetensors(p).metadata);
  // A file without metadata has none; a header that does not fit the file is refused as by read_safetensors.
  model::write_safetensors(dir / "plain.safetensors", {{"w", torch::ones({2})}});
  CHECK(model::read_safetensors_metadata(dir / "plain.safetensors").empty());
  write_bytes(dir / "bad.safetensors", std::string("\xff\xff\xff\xff\x00\x00\x00\x00{}", 10));
  require_bad_input([&] { model::read_safetensors_metadata(dir / "bad.safetensors"); }, {"bad.safetensors"});
}
