// Helpers for the data tests: a scratch folder under the system temp directory and writers
// for the on-disk formats, built byte by byte here (independently of lib/data/) so that the
// readers are checked against the formats, not against themselves.
#pragma once

#include <cstdint>           // int32_t, uint16_t, uint32_t
#include <cstring>           // std::memcpy
#include <filesystem>        // std::filesystem
#include <fstream>           // std::ofstream
#include <random>            // std::random_device
#include <string>            // std::string
#include <vector>            // std::vector
#include "lib/config/experiment.h"  // ModelSection
#include "tests/temp_dir.h"          // TempDir::remove_tree

namespace fp8t::data::testing {

// A fresh folder, removed with everything in it when the object goes out of scope.
class ScratchDir {
 public:
  ScratchDir() {
    namespace fs = std::filesystem;
    path_ = fs::temp_directory_path() /
            ("fp8t_data_test_" + std::to_string(std::random_device{}()) + "_" + std::to_string(counter()++));
    fs::create_directories(path_);
  }
  ~ScratchDir() { fp8t::test::TempDir::remove_tree(path_); }  // see temp_dir.h: no remove_all
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<char>(text.begin(), text.end()));
}

template <typename T>
void append_le(std::vector<char>& bytes, T value) {  // the test hosts are little-endian
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  bytes.insert(bytes.end(), raw, raw + sizeof(T));
}

// An llm.c shard: 256 int32 header [magic, version, count, 0...] and the tokens as Token.
template <typename Token>
std::vector<char> llmc_shard_bytes(const std::vector<uint32_t>& tokens, int32_t magic, int32_t version,
                                   int64_t header_count = -1) {
  std::vector<char> bytes;
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(header_count >= 0 ? header_count : static_cast<int64_t>(tokens.size()));
  for (int32_t w : header) append_le(bytes, w);
  for (uint32_t t : tokens) append_le(bytes, static_cast<Token>(t));
  return bytes;
}

inline std::vector<char> nanogpt_bin_bytes(const std::vector<uint32_t>& tokens) {
  std::vector<char> bytes;
  for (uint32_t t : tokens) append_le(bytes, static_cast<uint16_t>(t));
  return bytes;
}

// The model section a data source reads: its vocabulary and sequence length.
inline fp8t::ModelSection model_of(int64_t vocab, int64_t seq_len) {
  fp8t::ModelSection model;
  model.vocab_size = vocab;
  model.seq_len = seq_len;
  return model;
}

}  // namespace fp8t::data::testing
