#include "lib/checkpoint/health.h"

#include <fmt/format.h>  // fmt::format

#include <algorithm>  // std::nth_element
#include <cmath>      // std::isfinite
#include <fstream>    // std::ifstream
#include <limits>     // std::numeric_limits
#include <vector>     // std::vector

namespace fp8t::checkpoint {
namespace {

double median(const std::deque<double>& values) {
  std::vector<double> v(values.begin(), values.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

// JSON writes NaN and inf as null.
double number_or_nan(const nlohmann::json& row, const char* key) {
  if (!row.contains(key) || !row[key].is_number()) return std::numeric_limits<double>::quiet_NaN();
  return row[key].get<double>();
}

void push_bounded(std::deque<double>& window, double value) {
  window.push_back(value);
  if (window.size() > HealthRule::kWindow) window.pop_front();
}

}  // namespace

nlohmann::json CheckpointVerdict::to_json() const {
  return {{"checkpoint_step", checkpoint}, {"next_step_loss", next.loss}, {"next_step_grad_norm", next.grad_norm},
          {"next_step_applied", next.applied}, {"healthy", healthy}, {"why", why}};
}

std::optional<CheckpointVerdict> CheckpointVerdict::from_row(const nlohmann::json& row) {
  if (!row.is_object() || !row.contains("checkpoint_check") || !row.contains("step")) return std::nullopt;
  const nlohmann::json& c = row["checkpoint_check"];
  if (!c.is_object() || !c.contains("checkpoint_step") || !c["checkpoint_step"].is_number_integer() ||
      !c.contains("healthy") || !c["healthy"].is_boolean() || !row["step"].is_number_integer()) {
    return std::nullopt;
  }
  CheckpointVerdict v;
  v.checkpoint = c["checkpoint_step"].get<int64_t>();
  v.next.step = row["step"].get<int64_t>();
  v.next.loss = number_or_nan(c, "next_step_loss");
  v.next.grad_norm = number_or_nan(c, "next_step_grad_norm");
  v.next.applied = c.value("next_step_applied", true);
  v.healthy = c["healthy"].get<bool>();
  v.why = c.value("why", "");
  return v;
}

bool HealthRule::judge(const StepSample& s, std::string& why) const {
  if (!s.applied || !std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    why = "skipped: its loss or gradient norm was not finite";
    return false;
  }
  why = fmt::format("loss {:.4g}, gradient norm {:.4g}", s.loss, s.grad_norm);
  if (losses_.size() < kMinReferences) return true;
  const double loss_median = median(losses_), norm_median = median(grad_norms_);
  if (s.loss > kLossSpike * loss_median) {
    why += fmt::format(": a loss spike, {:.3g} x the median {:.4g} of the {} healthy steps before (limit {:g} x)",
                       s.loss / loss_median, loss_median, losses_.size(), kLossSpike);
    return false;
  }
  if (s.grad_norm > kGradNormSpike * norm_median) {
    why += fmt::format(": a gradient-norm spike, {:.3g} x the median {:.4g} of the {} healthy steps before "
                       "(limit {:g} x)",
                       s.grad_norm / norm_median, norm_median, grad_norms_.size(), kGradNormSpike);
    return false;
  }
  return true;
}

void HealthRule::observe(const StepSample& s) {
  std::string why;
  if (!judge(s, why)) return;
  push_bounded(losses_, s.loss);
  push_bounded(grad_norms_, s.grad_norm);
}

void CheckpointHealth::load(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded() || !row.is_object()) continue;
    if (const auto verdict = CheckpointVerdict::from_row(row)) {
      rule_.observe(verdict->next);
      verdicts_[verdict->checkpoint] = *verdict;
    } else if (row.contains("loss") && row.contains("grad_norm") && row.contains("step")) {
      rule_.observe({row["step"].is_number_integer() ? row["step"].get<int64_t>() : 0, number_or_nan(row, "loss"),
                     number_or_nan(row, "grad_norm"), true});
    }
  }
}

const CheckpointVerdict& CheckpointHealth::judge_checkpoint(const StepSample& next) {
  CheckpointVerdict v;
  v.checkpoint = next.step - 1;
  v.next = next;
  v.healthy = rule_.judge(next, v.why);
  rule_.observe(next);
  return verdicts_[v.checkpoint] = v;
}

namespace {

std::string step_judged(const CheckpointVerdict& v) {
  return fmt::format("step {}, trained from its weights, was {} ({})", v.next.step,
                     v.healthy ? "healthy" : "not healthy", v.why);
}

}  // namespace

WayBack choose_way_back(const std::map<int64_t, std::filesystem::path>& checkpoints,
                        const std::map<int64_t, CheckpointVerdict>& verdicts, int64_t first_skipped) {
  WayBack out;
  std::string passed_over;
  for (auto it = checkpoints.lower_bound(first_skipped); it != checkpoints.begin();) {
    --it;
    const auto verdict = verdicts.find(it->first);
    if (verdict != verdicts.end() && !verdict->second.healthy) {
      passed_over += fmt::format(" Not step {}: {}.", it->first, step_judged(verdict->second));
      continue;
    }
    out.checkpoint = *it;
    out.explanation = verdict != verdicts.end()
                          ? fmt::format("Go back to step {} ({}): {}.", it->first, it->second.string(),
                                        step_judged(verdict->second))
                          : fmt::format("Go back to step {} ({}): the newest checkpoint before step {} (its next "
                                        "step was not checked).",
                                        it->first, it->second.string(), first_skipped);
    out.explanation += passed_over;
    return out;
  }
  out.explanation = passed_over.empty()
                        ? fmt::format("No checkpoint from before step {} is kept.", first_skipped)
                        : fmt::format("No kept checkpoint from before step {} had a healthy next step.{}",
                                      first_skipped, passed_over);
  return out;
}

}  // namespace fp8t::checkpoint
