// Token files: llm.c shards and headerless nanoGPT .bin files, told apart by the header.
//
// llm.c (dev/data/data_common.py, llmc/dataloader.h): a header of 256 little-endian int32
// (1024 bytes) = [magic, version, token count, 0, ...], then the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2);
//   magic 20240801, version 7: uint32 tokens (Llama 3).
// The file size must be exactly 1024 + count * sizeof(token).
// nanoGPT (data/*/prepare.py): raw uint16 tokens, no header, so the size must be even.
#pragma once

#include <cstdint>      // int32_t
#include <string>       // std::string
#include <string_view>  // std::string_view

#include "lib/data/token_store.h"  // TokenStore

namespace fp8t::data {

constexpr int32_t kLlmcMagicUint16 = 20240520;
constexpr int32_t kLlmcVersionUint16 = 1;
constexpr int32_t kLlmcMagicUint32 = 20240801;
constexpr int32_t kLlmcVersionUint32 = 7;
constexpr int kLlmcHeaderInts = 256;
constexpr int kLlmcHeaderBytes = kLlmcHeaderInts * 4;

enum class TokenFileFormat { kLlmcUint16, kLlmcUint32, kNanoGptUint16 };

// "llm.c shard v1 (uint16)", "llm.c shard v7 (uint32)", "nanoGPT .bin (uint16)".
const char* format_name(TokenFileFormat format);

struct TokenFile {
  TokenStore tokens;
  TokenFileFormat format = TokenFileFormat::kNanoGptUint16;
};

// Reads and validates `path`. A file counts as an llm.c shard when it starts with a known
// magic, or when it has the shape of an llm.c header (1024+ bytes whose header words 3..255
// are zero, as data_common.py writes them) — then an unknown magic is reported as a bad magic
// instead of being misread as raw tokens. Everything else is a nanoGPT .bin.
// Errors (bad input) name `path` and `config_key`.
TokenFile read_token_file(const std::string& path, std::string_view config_key);

}  // namespace fp8t::data
