#include "lib/train/job_fingerprint.h"

#include <fmt/format.h>  // fmt::format

#include <algorithm>  // std::min
#include <fstream>    // std::ifstream
#include <map>        // std::map
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "lib/config/fields.h"    // config::fields, format_value
#include "lib/data/data_file.h"  // data::expand_data_paths
#include "lib/util/crc32c.h"      // crc32c_extend

namespace fs = std::filesystem;

namespace fp8t::train {
namespace {

constexpr int64_t kHeadBytes = 64 << 10;
constexpr int64_t kSampleBytes = 4 << 10;
constexpr int64_t kSamples = 16;

// CRC32C of `n` bytes at `offset` extended onto `crc` (a short read extends what it read).
uint32_t crc_of_range(std::ifstream& in, int64_t offset, int64_t n, uint32_t crc) {
  std::vector<char> buf(static_cast<size_t>(n));
  in.clear();
  in.seekg(offset);
  in.read(buf.data(), n);
  return crc32c_extend(crc, buf.data(), static_cast<size_t>(in.gcount()));
}

// "data.train_path: 'a.bin'".
std::string file_label(const nlohmann::json& entry) {
  return fmt::format("{}: '{}'", entry.value("key", std::string("?")), entry.value("path", std::string("?")));
}

// (key, path) -> fingerprint of a data_record().
std::map<std::pair<std::string, std::string>, std::string> by_file(const nlohmann::json& record) {
  std::map<std::pair<std::string, std::string>, std::string> out;
  for (const nlohmann::json& e : record) {
    out[{e.value("key", std::string()), e.value("path", std::string())}] = e.value("fingerprint", std::string());
  }
  return out;
}

}  // namespace

std::vector<InputFile> input_files(const ExperimentConfig& cfg) {
  std::vector<InputFile> out;
  const DataSection& d = cfg.data;
  if (d.source != DataSource::kSynthetic) {
    for (const std::string& path : data::expand_data_paths(d.train_path, "data.train_path")) {
      out.push_back({"data.train_path", path});
    }
    for (const std::string& path : data::expand_data_paths(d.val_path, "data.val_path")) {
      out.push_back({"data.val_path", path});
    }
  }
  if (!cfg.model.init_from.empty()) out.push_back({"model.init_from", cfg.model.init_from});
  return out;
}

std::string file_fingerprint(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return "missing";
  const int64_t bytes = static_cast<int64_t>(size);
  const uint32_t head = crc_of_range(in, 0, std::min(bytes, kHeadBytes), 0);
  uint32_t samples = 0;
  if (bytes > kHeadBytes) {
    const int64_t span = bytes - kSampleBytes;  // sample i starts at i * span / (kSamples - 1)
    for (int64_t i = 0; i < kSamples; ++i) samples = crc_of_range(in, i * span / (kSamples - 1), kSampleBytes, samples);
  }
  return fmt::format("size {} B, head crc32c 0x{:08x}, samples crc32c 0x{:08x}", bytes, head, samples);
}

std::vector<dist::FingerprintItem> job_fingerprint(const ExperimentConfig& cfg) {
  std::vector<dist::FingerprintItem> items;
  for (const config::Field& f : config::fields()) {
    items.push_back({fmt::format("config key {}", f.key), config::format_value(f, f.get(cfg))});
  }
  for (const InputFile& file : input_files(cfg)) {
    items.push_back({fmt::format("file {} ({})", file.path.string(), file.key), file_fingerprint(file.path)});
  }
  return items;
}

nlohmann::json data_record(const ExperimentConfig& cfg) {
  nlohmann::json record = nlohmann::json::array();
  for (const InputFile& file : input_files(cfg)) {
    if (file.key == "model.init_from") continue;  // the starting weights: a resume replaces them
    record.push_back({{"key", file.key}, {"path", file.path.string()}, {"fingerprint", file_fingerprint(file.path)}});
  }
  return record;
}

std::vector<std::string> data_record_changes(const nlohmann::json& recorded, const nlohmann::json& now) {
  const auto then_files = by_file(recorded), now_files = by_file(now);
  std::vector<std::string> out;
  for (const nlohmann::json& e : recorded) {
    const auto it = now_files.find({e.value("key", std::string()), e.value("path", std::string())});
    if (it == now_files.end()) {
      out.push_back(file_label(e) + " is no longer named (the pattern no longer matches it, or it was removed)");
    } else if (it->second != e.value("fingerprint", std::string())) {
      out.push_back(fmt::format("{} holds other data: {} when the checkpoint was written, {} now", file_label(e),
                                e.value("fingerprint", std::string()), it->second));
    }
  }
  for (const nlohmann::json& e : now) {
    if (then_files.count({e.value("key", std::string()), e.value("path", std::string())}) == 0) {
      out.push_back(file_label(e) + " is new (the checkpoint was not trained on it)");
    }
  }
  if (out.empty() && recorded.size() == now.size()) {
    for (size_t i = 0; i < now.size(); ++i) {
      if (recorded[i].value("path", std::string()) == now[i].value("path", std::string())) continue;
      out.push_back(fmt::format("the same files in another order: {} is now where {} was", file_label(now[i]),
                                file_label(recorded[i])));
      break;
    }
  }
  return out;
}

}  // namespace fp8t::train
