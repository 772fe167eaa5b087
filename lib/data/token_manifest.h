// manifest.json: what scripts/prepare_data.py writes beside its token shards (the tokenizer, its
// vocabulary size, the shards). fp8train reads the vocabulary from it to tell a
// tokenizer/vocabulary mismatch before a single token is evaluated (`fp8train eval`).
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

namespace fp8t::data {

struct TokenManifest {
  std::filesystem::path path;  // the manifest.json
  int64_t vocab_size = 0;      // the tokenizer's vocabulary, added tokens included
  std::string tokenizer;       // the tokenizer's file(s) as the manifest names them
  std::optional<int64_t> separator_id;  // the token before every document
};

// The manifest.json in the folder of `file`, when there is one written by prepare_data.py
// (a JSON object with "vocab_size" and "shards"); any other manifest.json is not ours and
// gives nothing. One of ours that cannot be read or parsed is bad input naming it.
std::optional<TokenManifest> manifest_beside(const std::filesystem::path& file);

// The manifests beside `files` (each folder once), in the order of the files.
std::vector<TokenManifest> manifests_beside(const std::vector<std::string>& files);

}  // namespace fp8t::data
