// Which checkpoint a diverged run should go back to: the newest one whose next step was healthy.
//
// A finite step can ruin the weights (train.lr 1e6): the checkpoint written after it is finite,
// loads, and diverges again from any learning rate. Its damage shows in the next step, the first
// computed from those weights. So every checkpoint of S steps is judged by step S + 1:
//
//   healthy    the step was applied (finite loss and gradient norm, lib/step/step_health.h) and,
//              once kMinReferences recent healthy steps are known, its loss is at most
//              kLossSpike (3) x their median loss and its gradient norm at most kGradNormSpike
//              (10) x their median gradient norm;
//   unhealthy  otherwise: skipped (non-finite), or a loss or gradient-norm spike.
//
// The references are the last kWindow (16) healthy observations: the log rows (the mean loss of
// the window, the log step's gradient norm) and the steps after checkpoints. A spike is judged
// against the steps before it and never becomes a reference.
//
// The loop reads step S + 1's own loss and gradient norm on the host (one extra read after each
// checkpoint) and writes the verdict to metrics.jsonl as a row {"step": S + 1,
// "checkpoint_check": {...}} (no "loss" key: curves and reports skip it). A resume truncates
// metrics.jsonl after its step and so drops the verdicts of the checkpoints it trains again; it
// reads the rest back (load), so a divergence after a resume still knows the earlier ones.
#pragma once

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstdint>     // int64_t
#include <deque>       // std::deque
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <optional>    // std::optional
#include <string>      // std::string
#include <utility>     // std::pair

namespace fp8t::checkpoint {

// A step's loss and gradient norm as the host read them (1-based step).
struct StepSample {
  int64_t step = 0;
  double loss = 0.0;
  double grad_norm = 0.0;
  bool applied = true;  // false: skipped on the device (non-finite loss or gradient norm)
};

// The verdict on the checkpoint of `checkpoint` steps, from its next step.
struct CheckpointVerdict {
  int64_t checkpoint = 0;
  StepSample next;       // step checkpoint + 1
  bool healthy = false;
  std::string why;       // "loss 2.31, gradient norm 0.52" or "skipped: ..." or "loss 9.1e+05 is ..."

  nlohmann::json to_json() const;
  // Nothing for a row that is not a verdict.
  static std::optional<CheckpointVerdict> from_row(const nlohmann::json& row);
};

// The running medians of recent healthy steps and the rule above.
class HealthRule {
 public:
  static constexpr double kLossSpike = 3.0;
  static constexpr double kGradNormSpike = 10.0;
  static constexpr size_t kWindow = 16;
  static constexpr size_t kMinReferences = 3;

  // Whether `s` is healthy against the references so far; `why` says what was seen (and, when
  // unhealthy, which limit it broke).
  bool judge(const StepSample& s, std::string& why) const;
  // Adds `s` to the references when it is healthy.
  void observe(const StepSample& s);
  size_t references() const { return losses_.size(); }

 private:
  std::deque<double> losses_, grad_norms_;
};

class CheckpointHealth {
 public:
  // Reads the verdicts and the references from a run's metrics.jsonl (a missing file or an
  // unreadable line is skipped: nothing is known of those steps).
  void load(const std::filesystem::path& metrics);
  // Judges the checkpoint of `next.step - 1` steps by its next step, records the verdict and
  // returns it.
  const CheckpointVerdict& judge_checkpoint(const StepSample& next);
  // A log row's loss and gradient norm (added to the references when healthy).
  void observe(const StepSample& s) { rule_.observe(s); }
  const std::map<int64_t, CheckpointVerdict>& verdicts() const { return verdicts_; }

 private:
  HealthRule rule_;
  std::map<int64_t, CheckpointVerdict> verdicts_;  // by checkpoint step
};

// The checkpoint to go back to after a divergence whose first skipped step is `first_skipped`:
// the newest of `checkpoints` (step -> file) before that step that is not known to be unhealthy,
// and why, naming the newer ones passed over. Nothing when every one is unhealthy (or none is
// kept); `explanation` then says so.
struct WayBack {
  std::optional<std::pair<int64_t, std::filesystem::path>> checkpoint;
  std::string explanation;
};
WayBack choose_way_back(const std::map<int64_t, std::filesystem::path>& checkpoints,
                        const std::map<int64_t, CheckpointVerdict>& verdicts, int64_t first_skipped);

}  // namespace fp8t::checkpoint
