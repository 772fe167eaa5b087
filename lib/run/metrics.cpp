#include "lib/run/metrics.h"

#include <cerrno>   // errno
#include <cstring>  // std::strerror
#include <fstream>  // std::ifstream
#include <string>   // std::string, std::getline

#include "lib/run/run_dir.h"  // write_text_atomic, throw_if_disk_full_injected
#include "lib/util/error.h"   // FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::run {

MetricsWriter::MetricsWriter(const std::filesystem::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    const int err = errno;
    FP8T_THROW(ExitCode::kFailure, "cannot open metrics file ", path.string(),
               " for appending: ", std::strerror(err));
  }
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  FP8T_CHECK(record.is_object(), "MetricsWriter::write: a record must be a JSON object");
  // Non-finite floats dump as null; invalid UTF-8 in strings is replaced, never thrown.
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  throw_if_disk_full_injected(path_, path_);
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() &&
                  std::fflush(file_) == 0;
  if (!ok) {
    const int err = errno;
    FP8T_THROW(ExitCode::kFailure, "cannot write metrics file ", path_.string(), ": ",
               std::strerror(err));
  }
}

int64_t truncate_metrics_after(const std::filesystem::path& path, int64_t last_step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return 0;
  std::ifstream in(path, std::ios::binary);
  FP8T_INPUT_CHECK(in.good(), "cannot read metrics file ", path.string());
  std::string kept;
  std::string line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool torn = record.is_discarded() || !record.is_object();
    const bool later = !torn && record.contains("step") && record["step"].is_number() &&
                       record["step"].get<double>() > static_cast<double>(last_step);
    if (torn || later) {
      ++dropped;
      continue;
    }
    kept += line;
    kept += '\n';
  }
  if (dropped > 0) write_text_atomic(path, kept);
  return dropped;
}

void write_summary(const std::filesystem::path& path, const nlohmann::json& summary) {
  write_text_atomic(path,
                    summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace fp8t::run
