#include "lib/report/run_folder.h"

#include <fcntl.h>     // ::open
#include <sys/file.h>  // ::flock
#include <unistd.h>    // ::close

#include <yaml-cpp/yaml.h>  // YAML::Load, YAML::Emitter

#include <algorithm>  // std::find_if
#include <cmath>    // std::nan
#include <fstream>  // std::ifstream
#include <sstream>  // std::ostringstream

namespace fp8t::report {
namespace fs = std::filesystem;
namespace {

bool read_text(const fs::path& p, std::string& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

void flatten_node(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten_node(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  if (node.IsScalar()) {
    out[prefix] = node.Scalar();
    return;
  }
  YAML::Emitter em;
  em << YAML::Flow << node;
  out[prefix] = node.IsNull() ? "null" : em.c_str();
}

double number_or_nan(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : std::nan(""); }

void push(Series& s, int64_t step, const nlohmann::json& v) {
  s.step.push_back(step);
  s.value.push_back(number_or_nan(v));
}

// Appends one log row's "fp8" array to the history. A slot missing from a row gets NaN.
void add_fp8_row(Fp8History& h, int64_t step, const nlohmann::json& rows) {
  const size_t n = h.steps.size();
  h.steps.push_back(step);
  for (auto& s : h.slots) {
    for (auto* v : {&s.amax, &s.scale, &s.saturated, &s.underflow}) v->push_back(std::nan(""));
  }
  for (const auto& r : rows) {
    if (!r.is_object() || !r.contains("slot")) continue;
    const std::string name = r["slot"].is_string() ? r["slot"].get<std::string>() : r["slot"].dump();
    auto it = std::find_if(h.slots.begin(), h.slots.end(), [&](const SlotSeries& s) { return s.slot == name; });
    if (it == h.slots.end()) {
      SlotSeries s;
      s.slot = name;
      s.format = r.value("format", "");
      for (auto* v : {&s.amax, &s.scale, &s.saturated, &s.underflow}) v->assign(n + 1, std::nan(""));
      h.slots.push_back(std::move(s));
      it = h.slots.end() - 1;
    }
    it->amax[n] = number_or_nan(r.value("amax", nlohmann::json()));
    it->scale[n] = number_or_nan(r.value("scale", nlohmann::json()));
    it->saturated[n] = number_or_nan(r.value("saturated", nlohmann::json()));
    it->underflow[n] = number_or_nan(r.value("underflow", nlohmann::json()));
  }
}

// The least balanced MoE layer of a row's "moe" record (tokens_max / tokens_mean).
void add_moe_row(RunFolder& run, const nlohmann::json& moe) {
  run.expert_max_over_mean.reset();
  for (const auto& [layer, s] : moe.items()) {
    if (!s.is_object() || !s.value("tokens_mean", nlohmann::json()).is_number() ||
        !s.value("tokens_max", nlohmann::json()).is_number()) {
      continue;
    }
    const double mean = s["tokens_mean"].get<double>(), max = s["tokens_max"].get<double>();
    if (mean <= 0.0) continue;
    if (!run.expert_max_over_mean || max / mean > *run.expert_max_over_mean) {
      run.expert_max_over_mean = max / mean;
      run.expert_layer = layer;
    }
  }
}

void add_metrics_row(RunFolder& run, const nlohmann::json& r) {
  if (!r.is_object() || !r.contains("step") || !r["step"].is_number()) return;
  const int64_t step = r["step"].get<int64_t>();
  if (r.contains("val_loss")) push(run.val_loss, step, r["val_loss"]);
  if (!r.contains("loss")) return;
  push(run.loss, step, r["loss"]);
  push(run.lr, step, r.value("lr", nlohmann::json()));
  push(run.grad_norm, step, r.value("grad_norm", nlohmann::json()));
  push(run.tokens_per_s, step, r.value("tokens_per_s", nlohmann::json()));
  if (r.contains("fp8") && r["fp8"].is_array()) add_fp8_row(run.fp8, step, r["fp8"]);
  if (r.contains("moe") && r["moe"].is_object()) add_moe_row(run, r["moe"]);
}

void read_metrics(RunFolder& run, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0, bad = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_discarded()) {
      const bool torn_last = in.peek() == std::char_traits<char>::eof() && text.back() != '\n';
      if (!torn_last) ++bad;
      continue;
    }
    add_metrics_row(run, r);
  }
  if (bad > 0) run.problems.push_back("metrics.jsonl: " + std::to_string(bad) + " unreadable line(s) skipped");
}

void read_config(RunFolder& run, const fs::path& file) {
  std::string text;
  if (!read_text(file, text)) {
    run.problems.push_back("no config.yaml");
    return;
  }
  try {
    run.config = flatten_yaml(text);
  } catch (const YAML::Exception& e) {
    run.problems.push_back("config.yaml is not valid YAML (" + std::string(e.what()) + ")");
  }
}

// Whether no process writes the run folder: its lock file (.fp8train.lock, see lib/run/run_dir.h)
// exists and nobody holds its flock. A folder without one says nothing either way.
bool writer_gone(const fs::path& dir) {
  const int fd = ::open((dir / ".fp8train.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  ::close(fd);  // releases the probe's lock
  return free;
}

void read_summary(RunFolder& run, const fs::path& file) {
  std::string text;
  if (!read_text(file, text)) {
    if (writer_gone(file.parent_path())) {
      run.status = "unfinished";
      run.problems.push_back("no summary.json and no process writes the folder: the run stopped without writing "
                             "it (if it trained every step, `fp8train --resume` writes it)");
    } else {
      run.status = "running";
      run.problems.push_back("no summary.json: still running, or stopped without writing it");
    }
    return;
  }
  run.summary = nlohmann::json::parse(text, nullptr, false);
  if (run.summary.is_discarded() || !run.summary.is_object()) {
    run.summary = nullptr;
    run.status = "unknown";
    run.problems.push_back("summary.json is not a JSON object");
    return;
  }
  run.status = run.summary.value("status", "unknown");
  if (run.status == "running") run.problems.push_back("still running (summary.json says so)");
  if (run.summary.contains("run") && run.summary["run"].is_string()) run.name = run.summary["run"];
}

}  // namespace

std::map<std::string, std::string> flatten_yaml(const std::string& text) {
  std::map<std::string, std::string> out;
  flatten_node(YAML::Load(text), "", out);
  return out;
}

RunFolder read_run_folder(const fs::path& dir) {
  RunFolder run;
  run.path = dir;
  run.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    run.status = "not a run";
    run.problems.push_back(fs::exists(dir, ec) ? "not a folder" : "does not exist");
    return run;
  }
  const bool has_config = fs::exists(dir / "config.yaml", ec), has_metrics = fs::exists(dir / "metrics.jsonl", ec),
             has_summary = fs::exists(dir / "summary.json", ec);
  if (!has_config && !has_metrics && !has_summary) {
    run.status = "not a run";
    run.problems.push_back("not a run folder (no config.yaml, metrics.jsonl or summary.json)");
    return run;
  }
  run.is_run = true;
  read_config(run, dir / "config.yaml");
  read_summary(run, dir / "summary.json");
  std::string text;
  if (!read_text(dir / "metrics.jsonl", text)) {
    run.problems.push_back("no metrics.jsonl: no curves");
  } else {
    read_metrics(run, text);
  }
  return run;
}

}  // namespace fp8t::report
