#include "lib/model/safetensors.h"

#include <bit>      // std::endian
#include <cerrno>   // errno
#include <cstring>  // std::strerror
#include <fstream>  // std::ifstream, std::ofstream
#include <algorithm>  // std::sort

#include <ATen/ATen.h>          // at::empty, Tensor::to
#include <nlohmann/json.hpp>    // nlohmann::json

#include "lib/util/error.h"  // FP8T_INPUT_CHECK, FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t {
namespace model {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little endian, as this host");

// Header lengths beyond this are rejected, as the reference reader does (100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_names() {
  static const std::vector<std::pair<std::string, at::ScalarType>> n = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
      {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool}};
  return n;
}

std::string dtype_name(at::ScalarType t) {
  for (const auto& [name, type] : dtype_names()) {
    if (type == t) return name;
  }
  FP8T_THROW(ExitCode::kBadInput, "safetensors: dtype ", c10::toString(t), " cannot be stored");
}

// The dtype named in the header, or a bad-input error naming the file and tensor.
at::ScalarType parse_dtype(const std::string& name, const fs::path& path, const std::string& tensor) {
  for (const auto& [n, type] : dtype_names()) {
    if (n == name) return type;
  }
  FP8T_THROW(ExitCode::kBadInput, path.string(), ": tensor '", tensor, "' has dtype '", name,
             "', which fp8train does not read (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
}

std::string header_json(const std::vector<std::pair<std::string, at::Tensor>>& cpu,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : cpu) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  return text;
}

void write_u64_le(std::ostream& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFFu);
  out.write(b, 8);
}

}  // namespace

void write_safetensors(const fs::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Data in the order of the offsets: the names' order in the file's header (sorted).
  std::map<std::string, at::Tensor> sorted;
  for (const auto& [name, t] : tensors) {
    FP8T_INPUT_CHECK(name != "__metadata__", "safetensors: '__metadata__' cannot name a tensor");
    FP8T_INPUT_CHECK(sorted.emplace(name, t.detach().to(at::kCPU).contiguous()).second,
                     "safetensors: tensor name '", name, "' appears twice");
  }
  const std::vector<std::pair<std::string, at::Tensor>> cpu(sorted.begin(), sorted.end());
  const std::string header = header_json(cpu, metadata);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out.good()) FP8T_THROW(ExitCode::kFailure, "cannot create ", path.string(), ": ", std::strerror(errno));
  write_u64_le(out, header.size());
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : cpu) {
    out.write(static_cast<const char*>(t.const_data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
  out.flush();
  if (!out.good()) FP8T_THROW(ExitCode::kFailure, "cannot write ", path.string(), ": ", std::strerror(errno));
}

namespace {

// The header's JSON object, checked to fit the file.
nlohmann::json read_header(std::ifstream& in, const fs::path& path, uint64_t file_size, uint64_t& data_start) {
  FP8T_INPUT_CHECK(file_size >= 8, path.string(), " is not a safetensors file (", file_size, " bytes)");
  unsigned char b[8];
  in.read(reinterpret_cast<char*>(b), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[i]) << (8 * i);
  FP8T_INPUT_CHECK(n <= kMaxHeaderBytes && n <= file_size - 8, path.string(),
                   " is not a safetensors file (header length ", n, " does not fit the file of ", file_size, " bytes)");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  FP8T_INPUT_CHECK(in.good(), "cannot read ", path.string());
  data_start = 8 + n;
  try {
    nlohmann::json header = nlohmann::json::parse(text);
    FP8T_INPUT_CHECK(header.is_object(), path.string(), " is not a safetensors file (the header is not an object)");
    return header;
  } catch (const nlohmann::json::exception& e) {
    FP8T_THROW(ExitCode::kBadInput, path.string(), " is not a safetensors file (header: ", e.what(), ")");
  }
}

struct Entry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& name, const nlohmann::json& v, const fs::path& path) {
  const std::string where = path.string() + ": tensor '" + name + "'";
  try {
    Entry e{name, parse_dtype(v.at("dtype").get<std::string>(), path, name), v.at("shape").get<std::vector<int64_t>>(),
            v.at("data_offsets").at(0).get<uint64_t>(), v.at("data_offsets").at(1).get<uint64_t>()};
    int64_t numel = 1;
    for (int64_t s : e.shape) {
      FP8T_INPUT_CHECK(s >= 0, where, " has a negative dimension");
      numel *= s;
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * c10::elementSize(e.dtype);
    FP8T_INPUT_CHECK(e.end >= e.begin && e.end - e.begin == bytes, where, " has data_offsets [", e.begin, ", ", e.end,
                     "] for ", bytes, " bytes of data");
    return e;
  } catch (const nlohmann::json::exception& ex) {
    FP8T_THROW(ExitCode::kBadInput, where, " has a malformed entry (", ex.what(), ")");
  }
}

// The data regions, sorted by offset, must tile [0, data_size) exactly.
void check_tiling(std::vector<Entry>& entries, uint64_t data_size, const fs::path& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    FP8T_INPUT_CHECK(e.begin == expected, path.string(), ": tensor '", e.name, "' starts at byte ", e.begin,
                     " of the data, expected ", expected, " (regions overlap or leave a gap)");
    expected = e.end;
  }
  FP8T_INPUT_CHECK(expected == data_size, path.string(), ": the tensors cover ", expected, " bytes but the data is ",
                   data_size, " bytes (truncated or extended file)");
}

}  // namespace

namespace {

// The file opened at its start, after the checks that it is one; `file_size` gets its size.
std::ifstream open_safetensors(const fs::path& path, uint64_t& file_size) {
  std::error_code ec;
  FP8T_INPUT_CHECK(!fs::is_directory(path, ec), path.string(), " is a folder, not a safetensors file; name the "
                   ".safetensors file inside it");
  FP8T_INPUT_CHECK(fs::is_regular_file(path, ec), "safetensors file ", path.string(), " does not exist");
  file_size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  FP8T_INPUT_CHECK(in.good(), "cannot open ", path.string(), ": ", std::strerror(errno));
  return in;
}

// The header's "__metadata__" entries (each a string).
std::map<std::string, std::string> header_metadata(const nlohmann::json& header, const fs::path& path) {
  std::map<std::string, std::string> metadata;
  if (!header.contains("__metadata__")) return metadata;
  for (const auto& [k, m] : header["__metadata__"].items()) {
    FP8T_INPUT_CHECK(m.is_string(), path.string(), ": __metadata__ entry '", k, "' is not a string");
    metadata[k] = m.get<std::string>();
  }
  return metadata;
}

}  // namespace

std::map<std::string, std::string> read_safetensors_metadata(const fs::path& path) {
  uint64_t file_size = 0, data_start = 0;
  std::ifstream in = open_safetensors(path, file_size);
  return header_metadata(read_header(in, path, file_size, data_start), path);
}

SafetensorsContents read_safetensors(const fs::path& path) {
  uint64_t file_size = 0, data_start = 0;
  std::ifstream in = open_safetensors(path, file_size);
  const nlohmann::json header = read_header(in, path, file_size, data_start);

  SafetensorsContents out;
  out.metadata = header_metadata(header, path);
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name != "__metadata__") entries.push_back(parse_entry(name, v, path));
  }
  check_tiling(entries, file_size - data_start, path);
  for (const Entry& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    FP8T_INPUT_CHECK(in.good(), "cannot read tensor '", e.name, "' of ", path.string());
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace model
}  // namespace fp8t
