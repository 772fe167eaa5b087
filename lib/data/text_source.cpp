#include "lib/data/text_source.h"

#include <cstdint>  // uint8_t
#include <vector>   // std::vector

#include "lib/data/data_file.h"  // checked_file_size, open_binary, read_exact

namespace fp8t::data {

TokenStore read_text_file(const std::string& path, std::string_view config_key) {
  const uint64_t size = checked_file_size(path, config_key);
  std::ifstream in = open_binary(path, config_key);
  std::vector<uint8_t> bytes(size);
  read_exact(in, bytes.data(), size, path);
  return TokenStore(std::move(bytes));
}

}  // namespace fp8t::data
