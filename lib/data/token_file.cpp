#include "lib/data/token_file.h"

#include <algorithm>  // std::all_of
#include <array>      // std::array
#include <bit>        // std::endian

#include "lib/data/data_file.h"  // checked_file_size, open_binary, read_exact
#include "lib/util/error.h"      // FP8T_INPUT_CHECK

namespace fp8t::data {

// The formats are little-endian and are read by plain memory copies.
static_assert(std::endian::native == std::endian::little, "token files are read as little-endian");

const char* format_name(TokenFileFormat format) {
  switch (format) {
    case TokenFileFormat::kLlmcUint16:
      return "llm.c shard v1 (uint16)";
    case TokenFileFormat::kLlmcUint32:
      return "llm.c shard v7 (uint32)";
    case TokenFileFormat::kNanoGptUint16:
      return "nanoGPT .bin (uint16)";
  }
  return "?";
}

namespace {

bool is_known_magic(int32_t magic) { return magic == kLlmcMagicUint16 || magic == kLlmcMagicUint32; }

TokenFile read_llmc_shard(const std::array<int32_t, kLlmcHeaderInts>& header,
                          uint64_t file_bytes, const std::string& path, std::string_view key) {
  const int32_t magic = header[0];
  const int32_t version = header[1];
  FP8T_INPUT_CHECK(is_known_magic(magic), key, ": '", path, "' has an llm.c header with bad magic ", magic,
                   " (expected ", kLlmcMagicUint16, " for uint16 tokens or ", kLlmcMagicUint32,
                   " for uint32 tokens)");
  const bool wide = magic == kLlmcMagicUint32;
  const int32_t expected_version = wide ? kLlmcVersionUint32 : kLlmcVersionUint16;
  FP8T_INPUT_CHECK(version == expected_version, key, ": '", path, "' has llm.c magic ", magic,
                   " but bad version ", version, " (expected ", expected_version, ")");
  const int64_t count = header[2];
  FP8T_INPUT_CHECK(count >= 0, key, ": '", path, "' has a negative token count ", count,
                   " in its llm.c header");
  const uint64_t token_bytes = wide ? 4 : 2;
  const uint64_t expected_bytes = kLlmcHeaderBytes + static_cast<uint64_t>(count) * token_bytes;
  FP8T_INPUT_CHECK(file_bytes == expected_bytes, key, ": '", path, "' size mismatch: the llm.c header says ",
                   count, " tokens of ", token_bytes, " bytes, so the file should be ", kLlmcHeaderBytes,
                   " + ", count, " * ", token_bytes, " = ", expected_bytes, " bytes, but it is ", file_bytes,
                   " bytes (truncated or corrupt shard?)");
  // Read on demand: a shard of many GB opens at once and costs no RAM of its own.
  return {TokenStore::open_file(path, kLlmcHeaderBytes, count, static_cast<int>(token_bytes), key),
          wide ? TokenFileFormat::kLlmcUint32 : TokenFileFormat::kLlmcUint16};
}

}  // namespace

TokenFile read_token_file(const std::string& path, std::string_view key) {
  const uint64_t file_bytes = checked_file_size(path, key);
  std::ifstream in = open_binary(path, key);

  if (file_bytes >= static_cast<uint64_t>(kLlmcHeaderBytes)) {
    std::array<int32_t, kLlmcHeaderInts> header{};
    read_exact(in, header.data(), kLlmcHeaderBytes, path);
    const bool zero_tail = std::all_of(header.begin() + 3, header.end(), [](int32_t w) { return w == 0; });
    const bool zero_head = header[0] == 0 && header[1] == 0 && header[2] == 0;
    if (is_known_magic(header[0]) || (zero_tail && !zero_head)) {
      return read_llmc_shard(header, file_bytes, path, key);
    }
  } else if (file_bytes >= 4) {
    int32_t magic = 0;
    read_exact(in, &magic, sizeof(magic), path);
    FP8T_INPUT_CHECK(!is_known_magic(magic), key, ": '", path, "' starts with llm.c magic ", magic,
                     " but is only ", file_bytes, " bytes, shorter than the ", kLlmcHeaderBytes,
                     "-byte header (truncated shard?)");
  }

  FP8T_INPUT_CHECK(
      file_bytes % 2 == 0, key, ": '", path, "' has no llm.c header, so it is read as a nanoGPT .bin of ",
      "uint16 tokens, but its size ", file_bytes, " bytes is odd (truncated or not a token file?)");
  return {TokenStore::open_file(path, 0, static_cast<int64_t>(file_bytes / 2), 2, key),
          TokenFileFormat::kNanoGptUint16};
}

}  // namespace fp8t::data
