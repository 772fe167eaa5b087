// Opening the data files named in the config, with the errors a user can act on: every
// message names the file and the config key it came from (data.train_path / data.val_path).
#pragma once

#include <cstddef>      // std::size_t
#include <cstdint>      // int64_t, uint64_t
#include <fstream>      // std::ifstream
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace fp8t::data {

// The files a data key names, in order: each entry is a path, or a glob pattern (one with *, ?
// or [) that expands to its matches in sorted order. An entry that is an existing file is taken
// literally even when its name holds such characters. Bad input (naming the key): a pattern
// that matches nothing, a file named twice.
std::vector<std::string> expand_data_paths(const std::vector<std::string>& entries, std::string_view config_key);

// Whether an entry of a data key is a glob pattern that expand_data_paths expands (it holds *, ?
// or [ and is not an existing file).
bool is_glob_pattern(const std::string& entry);

// Makes room for `files` more open descriptors (every data file stays open while the run reads
// it): raises the soft RLIMIT_NOFILE up to the hard limit when needed; bad input when even the
// hard limit is too low.
void reserve_open_files(int64_t files, std::string_view config_key);

// Size in bytes of the regular, non-empty file `path`; throws a bad-input error naming `path`
// and `config_key` when it is missing, not a regular file, or empty.
uint64_t checked_file_size(const std::string& path, std::string_view config_key);

// Opens `path` for binary reading (bad-input error when that fails).
std::ifstream open_binary(const std::string& path, std::string_view config_key);

// Reads exactly `bytes` bytes into `dst`; a short read is a bad-input error naming `path`.
void read_exact(std::ifstream& in, void* dst, std::size_t bytes, const std::string& path);

}  // namespace fp8t::data
