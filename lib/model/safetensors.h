// The safetensors file format (Hugging Face): weights that leave and enter fp8train.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"key": "text", ...},
//    "<name>": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}
// (padded with spaces to a multiple of 8 bytes), then the raw little-endian tensor data, packed in
// offset order without gaps (offsets count from the first data byte).
//
// There is no maintained C++ safetensors library in Debian or on PyPI (the reference one is
// Rust, with Python bindings), and the format is small, so it is written here with nlohmann-json,
// following the checks of the reference reader: the header fits the file, every dtype is known,
// every tensor's byte count equals its element count times the dtype size, and the data regions
// tile the data section exactly.
#pragma once

#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include <ATen/core/Tensor.h>  // at::Tensor

namespace fp8t {
namespace model {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct SafetensorsContents {
  std::map<std::string, at::Tensor> tensors;         // CPU tensors in the file's dtypes
  std::map<std::string, std::string> metadata;       // the "__metadata__" entries
};

// Writes the tensors (any device; F32, F16, BF16, F64, I64, I32, U8 ...) with their dtypes and
// shapes, straight into `path` (to replace a file atomically, write a temporary one through
// lib/run/run_dir.h write_file_atomic, as `fp8train export` does). Throws fp8t::Error
// (kFailure, naming the path) on I/O errors, kBadInput on a duplicate name.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads a whole safetensors file. Throws fp8t::Error (kBadInput, naming the path and the
// tensor) when the file is missing or malformed.
SafetensorsContents read_safetensors(const std::filesystem::path& path);

// Only the "__metadata__" entries of a safetensors file (the header is read, no tensor). Throws
// as read_safetensors for a missing file or a malformed header.
std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path);

}  // namespace model
}  // namespace fp8t
