#include "lib/run/resume_config.h"

#include <spdlog/spdlog.h>  // spdlog::info, spdlog::warn

#include <filesystem>  // std::filesystem::exists
#include <fstream>     // std::ifstream
#include <sstream>     // std::ostringstream

#include "lib/config/fields.h"  // fields, format_value
#include "lib/config/loader.h"  // load_from_string
#include "lib/util/error.h"     // FP8T_THROW

namespace fp8t::run {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// What the checkpoint holds depends on these: the model's shapes (its moe section too), the data,
// the number format and the FP8 recipe (whose state the checkpoint carries).
bool changeable(const std::string& key) {
  return !(starts_with(key, "model.") || starts_with(key, "moe.") || starts_with(key, "data.") || key == "precision" ||
           key == "fp8.recipe");
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::vector<ConfigChange> config_changes(const ExperimentConfig& before, const ExperimentConfig& after) {
  std::vector<ConfigChange> out;
  for (const config::Field& f : config::fields()) {
    if (starts_with(f.key, "run.")) continue;
    const std::string a = config::format_value(f, f.get(before));
    const std::string b = config::format_value(f, f.get(after));
    if (a != b) out.push_back(ConfigChange{f.key, a, b, changeable(f.key)});
  }
  return out;
}

std::vector<ConfigChange> check_resume_config(const RunDir& dir, const ExperimentConfig& now) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir.config_path(), ec)) return {};
  ExperimentConfig before;
  try {
    before = config::load_from_string(read_text(dir.config_path()), dir.config_path().string()).config;
  } catch (const Error& e) {
    spdlog::warn("cannot compare with the run's previous config: {}", e.what());
    return {};
  }
  const std::vector<ConfigChange> changes = config_changes(before, now);
  std::string refused;
  for (const ConfigChange& c : changes) {
    if (!c.allowed) refused += (refused.empty() ? "" : ", ") + c.key + " (" + c.before + " -> " + c.after + ")";
  }
  if (!refused.empty()) {
    FP8T_THROW(ExitCode::kBadInput, "cannot resume ", dir.path().string(), " with a different ", refused,
               ": the checkpoint holds that model and data; start a new run (--run-name) instead");
  }
  return changes;
}

void record_resume_config(const RunDir& dir, const std::vector<ConfigChange>& changes, int64_t step) {
  if (changes.empty()) return;
  const std::string kept = "config.resume-" + std::to_string(step) + ".yaml";
  dir.write_text_atomic(kept, read_text(dir.config_path()));
  for (const ConfigChange& c : changes) {
    spdlog::info("resume at step {}: {} changed: {} -> {}", step, c.key, c.before, c.after);
  }
  spdlog::info("resume: the previous config is kept as {}", (dir.path() / kept).string());
}

}  // namespace fp8t::run
