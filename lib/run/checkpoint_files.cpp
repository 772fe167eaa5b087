#include "lib/run/checkpoint_files.h"

#include <algorithm>     // std::sort
#include <cctype>        // std::isdigit
#include <string_view>   // std::string_view
#include <system_error>  // std::error_code

namespace fs = std::filesystem;

namespace fp8t::run {
namespace {

constexpr std::string_view kPrefix = "checkpoint.";
constexpr std::string_view kStepTag = "step-";
constexpr std::string_view kSuffix = ".pt";

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// The digits of "<...>step-<digits>.pt" at the end of `name` when the tag starts at `tag_at`.
std::optional<int64_t> step_digits(const std::string& name, size_t tag_at) {
  const size_t begin = tag_at + kStepTag.size(), end = name.size() - kSuffix.size();
  if (begin >= end || end - begin > 18) return std::nullopt;  // 18 digits fit in int64_t
  for (size_t i = begin; i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
  }
  return std::stoll(name.substr(begin, end - begin));
}

}  // namespace

std::string kept_checkpoint_name(int64_t step) {
  std::string name = "checkpoint.step-";
  name += std::to_string(step);
  name += ".pt";
  return name;
}

std::optional<int64_t> checkpoint_file_step(const std::string& name) {
  if (!starts_with(name, kPrefix) || name.size() < kPrefix.size() + kStepTag.size() + kSuffix.size() + 1 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return std::nullopt;
  }
  // "checkpoint.step-<S>.pt", or "checkpoint.<part>.step-<S>.pt": the last ".step-" tag.
  const size_t tag = name.rfind(kStepTag);
  if (tag == std::string::npos || tag < kPrefix.size() || name[tag - 1] != '.') return std::nullopt;
  return step_digits(name, tag);
}

bool is_kept_checkpoint(const std::string& name) {
  return checkpoint_file_step(name).has_value() && starts_with(name, "checkpoint.step-");
}

std::map<int64_t, fs::path> kept_checkpoints(const fs::path& folder) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_kept_checkpoint(name) || !entry.is_regular_file(ec)) continue;
    out[*checkpoint_file_step(name)] = entry.path();
  }
  return out;
}

std::vector<std::string> remove_checkpoint_files_except(const fs::path& folder, const std::set<int64_t>& keep) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = checkpoint_file_step(name);
    if (!step || keep.count(*step) > 0) continue;
    std::error_code rm;
    if (fs::remove(entry.path(), rm)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::vector<std::string> remove_kept_checkpoints_after(const fs::path& folder, int64_t after) {
  std::vector<std::string> removed;
  for (const auto& [step, path] : kept_checkpoints(folder)) {
    std::error_code rm;
    if (step > after && fs::remove(path, rm)) removed.push_back(path.filename().string());
  }
  return removed;
}

std::string describe_kept(const std::map<int64_t, fs::path>& kept) {
  if (kept.empty()) return "none";
  std::string steps, files;
  for (const auto& [step, path] : kept) {
    if (!steps.empty()) steps += ", ";
    if (!files.empty()) files += ", ";
    steps += std::to_string(step);
    files += path.filename().string();
  }
  std::string out = kept.size() == 1 ? "step " : "steps ";
  out += steps;
  out += " (";
  out += files;
  out += ")";
  return out;
}

}  // namespace fp8t::run
