// What a training run accumulates for summary.json and carries across resumes: steps, tokens,
// time, the validation losses, the final status and the FP8 statistics (worst saturation and
// underflow per slot, the largest scale difference between ranks).
#pragma once

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstdint>   // int64_t
#include <limits>    // std::numeric_limits
#include <optional>  // std::optional
#include <string>    // std::string

#include "lib/util/timer.h"  // Stopwatch

namespace fp8t::train {

struct TrainingJob;

struct Progress {
  int64_t start_step = 0;  // where this invocation started (0, or the resumed checkpoint's step)
  int64_t step = 0;        // steps done so far (the loop's counter)
  int64_t tokens = 0;      // over all invocations
  double elapsed_before = 0.0;  // seconds spent by earlier invocations (resume)
  Stopwatch wall;               // this invocation's training time (reset when the loop starts)
  std::optional<double> best_val;
  std::optional<double> last_val;
  double last_loss = std::numeric_limits<double>::quiet_NaN();
  // "completed", "stopped" (--stop-after), "interrupted" (a signal), "diverged", "failed".
  std::string status = "completed";
  nlohmann::json worst_fp8 = nlohmann::json::object();  // slot -> {saturated, underflow, saturated_step, underflow_step}
  double max_scale_spread = 0.0;
  int64_t skipped_steps = 0;  // non-finite steps skipped, over all invocations (as of the last read)
  int64_t diverged_at = 0;    // the step where the run of skips that stopped it began (0: none)
  bool in_loop = false;       // the loop is training step `step` (a failure counts it as begun)
  // The log window the resumed checkpoint carried (its meta "log_window"; null: none), for the
  // StepLogger (lib/train/log_window.h).
  nlohmann::json log_window;

  double elapsed_s() const { return elapsed_before + wall.seconds(); }

  // The fields a checkpoint stores to continue the totals: best_val_loss, tokens, elapsed_s,
  // skipped_steps.
  nlohmann::json checkpoint_meta() const;
  // The inverse, for a checkpoint written at `step` (missing fields keep their defaults), and
  // the log window it carried.
  void restore(const nlohmann::json& meta, int64_t step);

  void record_eval(double val_loss);
  // Keeps the largest saturation/underflow fraction per slot of a metrics row's "fp8" array, and
  // the first log step (`step`) that showed it.
  void record_fp8_stats(const nlohmann::json& rows, int64_t step);
  // Keeps the largest scale difference between ranks. With `expect_identical` (fp8.reduce_amax)
  // it warns the first time the scales differ: the amax reduction is broken.
  void record_scale_spread(double spread, int64_t step, bool expect_identical);

  // summary.json of a run that ended (completed, stopped or interrupted).
  nlohmann::json summary(const TrainingJob& run) const;
  // summary.json of a run that failed ("diverged" or "failed") with `error`.
  nlohmann::json failure_summary(const std::string& error) const;
};

// The five slots with the largest saturation and the five with the largest underflow over the run,
// from Progress::worst_fp8: {"most_saturated": [{slot, fraction, step}], "most_underflow": [...]},
// the step the first log step that showed the fraction (a delayed run's first step casts with
// scale 1: its gradients' underflow shows there). summary.json's "fp8_worst".
nlohmann::json worst_fp8_slots(const nlohmann::json& worst_by_slot);

// What FP8 did in a run (summary.json's "fp8"; null unless precision fp8): the recipe and format,
// the Linear layers whose GEMMs ran in FP8 and the share of the Linear FLOPs that is, the layers
// kept in high precision, the scaled tensors and the range of their scales at the end (per-tensor
// recipes), and with fp8.stats the slots that saturated and underflowed most.
nlohmann::json fp8_summary(const TrainingJob& run, const Progress& progress);

// The end-of-run line for an fp8 run, from fp8_summary ("" for other precisions), e.g.
//   "fp8 (delayed scaling, HYBRID: E4M3 forward, E5M2 gradients; emulated on the CPU): 8 of 9
//    Linear layers in FP8 (95.2% of the Linear GEMM FLOPs; kept: lm_head), 24 scaled tensors,
//    scales 1 to 2.9e+03; saturation and underflow: add --fp8-stats"
std::string fp8_summary_line(const nlohmann::json& fp8);

}  // namespace fp8t::train
