// The text source: a file read as raw bytes, one token per byte (vocabulary 256). No
// tokenizer: byte-level models need none, and the bytes round-trip exactly.
#pragma once

#include <string>       // std::string
#include <string_view>  // std::string_view

#include "lib/data/token_store.h"  // TokenStore

namespace fp8t::data {

constexpr int64_t kByteVocabSize = 256;

// Every byte of `path` as a uint8 token. Errors name `path` and `config_key`.
TokenStore read_text_file(const std::string& path, std::string_view config_key);

}  // namespace fp8t::data
