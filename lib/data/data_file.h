// Opening the data files named in the config, with the errors a user can act on: every
// message names the file and the config key it came from (data.train_path / data.val_path).
#pragma once

#include <cstddef>      // std::size_t
#include <cstdint>      // uint64_t
#include <fstream>      // std::ifstream
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace fp8t::data {

// Size in bytes of the regular, non-empty file `path`; throws a bad-input error naming `path`
// and `config_key` when it is missing, not a regular file, or empty.
uint64_t checked_file_size(const std::string& path, std::string_view config_key);

// Opens `path` for binary reading (bad-input error when that fails).
std::ifstream open_binary(const std::string& path, std::string_view config_key);

// Reads exactly `bytes` bytes into `dst`; a short read is a bad-input error naming `path`.
void read_exact(std::ifstream& in, void* dst, std::size_t bytes, const std::string& path);

}  // namespace fp8t::data
