// metrics.jsonl (one JSON object per line, flushed per line) and summary.json.
#pragma once

#include <cstdint>     // int64_t
#include <cstdio>      // std::FILE
#include <filesystem>  // std::filesystem::path

#include <nlohmann/json.hpp>  // nlohmann::json

namespace fp8t::run {

class MetricsWriter {
 public:
  // Opens `path` for appending (created when missing), so a resumed run continues the file.
  // Throws fp8t::Error (kFailure, naming the path) when it cannot be opened.
  explicit MetricsWriter(const std::filesystem::path& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends `record` (a JSON object) as one line and flushes it. Non-finite numbers are written
  // as null (JSON has no NaN). Throws fp8t::Error (kFailure) on write errors.
  void write(const nlohmann::json& record);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// For resume: rewrites `path` (atomically) keeping only the records that belong to steps
// <= `last_step`, i.e. drops records with a numeric "step" field greater than last_step that a
// run wrote after its last checkpoint, and any torn (unparseable) line. Records without a
// "step" field are kept. A missing file is left missing. Returns the number of lines dropped.
int64_t truncate_metrics_after(const std::filesystem::path& path, int64_t last_step);

// Writes `summary` to `path` atomically, pretty-printed (2-space indent) with a final newline.
void write_summary(const std::filesystem::path& path, const nlohmann::json& summary);

}  // namespace fp8t::run
