// The step, log and eval phases of a training run, and the loop that strings them together with
// the checkpoint phase (lib/train/train_checkpoint.h). One iteration reads top to bottom:
//   train_step   micro-batches (forward, backward), FP8 scale update, clip, optimizer step
//   log          on log steps: read the loss on the host, build the metrics row, write it,
//                update the status line, check_step (too many skipped steps in a row: diverged);
//                the first step of a resumed run shows the status line only (its window, carried
//                by the checkpoint, goes on to the uninterrupted run's next row: log_window.h)
//   eval         on eval steps and after the last step
//   checkpoint   Checkpointer::due, then the stop conditions (--stop-after, a signal)
// The device is read on the host only on log, eval and checkpoint steps.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <nlohmann/json.hpp>   // nlohmann::json

#include <cstdint>   // int64_t
#include <optional>  // std::optional
#include <string>    // std::string

#include "lib/run/console.h"             // StatusLine, StatusFields
#include "lib/run/metrics.h"             // MetricsWriter
#include "lib/train/progress.h"          // Progress
#include "lib/run/run_dir.h"             // RunDir
#include "lib/train/run_setup.h"         // TrainingJob
#include "lib/run/tensorboard.h"         // TensorBoardWriter
#include "lib/step/step_health.h"        // StepHealth::Counts
#include "lib/checkpoint/health.h"        // CheckpointHealth
#include "lib/train/stop_signals.h"     // SignalGuard
#include "lib/train/log_window.h"        // LogWindow
#include "lib/train/train_checkpoint.h"  // Checkpointer
#include "lib/util/timer.h"              // Stopwatch

namespace fp8t::train {

// What one optimizer step left for the log phase.
struct StepResult {
  int64_t step = 0;      // 0-based index of the step just trained
  double lr = 0.0;
  at::Tensor grad_norm;  // before clipping, 0-d on the device
  bool log_step = false;
};

// What the log phase read on the host.
struct LoggedStep {
  double loss = 0.0;         // mean training loss of the applied steps since the previous row, over all ranks
  double grad_norm = 0.0;    // the logged step's global gradient norm (read once, for the row and the health record)
  bool stop_signal = false;  // some rank received a stop signal (data-parallel jobs only)
  step::StepHealth::Counts health;  // the non-finite step counters
};

// The log phase: accumulates the loss on the device between log steps (the LogWindow), and on
// log steps builds the metrics row, writes it (metrics.jsonl on rank 0) and updates the status
// line.
class StepLogger {
 public:
  // Opens metrics.jsonl for appending (rank 0), after a resume has truncated it; the window
  // goes on from the one the resumed checkpoint carried (Progress::log_window).
  StepLogger(TrainingJob& run, const run::RunDir& dir, Progress& progress);

  // Every train.log_interval steps, the last step, and the first step of a new run (a resumed
  // run's rows fall where the uninterrupted run's do).
  bool is_log_step(int64_t step) const;
  // The device-side sum the step adds its micro-batch losses to.
  at::Tensor& loss_sum() { return window_.loss_sum; }
  // What the next row averages so far (for the checkpoint).
  const LogWindow& window() const { return window_; }
  // Counts a trained step's micro-batches and tokens.
  void count_step();

  // Reads the loss (and, in a job, whether any rank has `signal_pending`), builds the row,
  // writes it and updates the status line.
  LoggedStep log(const StepResult& result, bool signal_pending);
  // The first step of a resumed run, not a log step: the status line shows this rank's window
  // so far (rank 0; one host read), no row is written and the window goes on.
  void show_status(const StepResult& result);
  // Before an evaluation after `step` steps of `batches` batches: the final one says that it
  // starts (it follows the last step's "ETA 0:00"); then eval_batch before each batch shows the
  // batches done, at most every eval_progress_seconds() (progress: nothing when quiet).
  void begin_eval(int64_t step, int64_t batches, bool final_eval);
  void eval_batch(int64_t done);
  // The metrics row and the status line of an evaluation after `step` steps.
  void log_eval(int64_t step, double val_loss);
  // The one place rows are written (metrics.jsonl; TensorBoard events with run.tensorboard).
  void write(const nlohmann::json& row);
  // Ends the status line (idempotent).
  void finish() { status_.finish(); }

 private:
  double read_loss(bool signal_pending, bool& stop_signal);
  // The mean loss of the window's applied micro-batches, from their sum over `ranks` ranks.
  double window_mean(double loss_total, int64_t skipped, int ranks) const;
  void add_fp8_fields(nlohmann::json& row, int64_t step);
  void add_routing_fields(nlohmann::json& row, run::StatusFields& status);

  TrainingJob& run_;
  Progress& progress_;
  std::optional<run::MetricsWriter> metrics_;
  std::optional<run::TensorBoardWriter> tensorboard_;  // rank 0 with run.tensorboard
  run::StatusLine status_;
  LogWindow window_;     // the losses since the previous row, summed on the device
  Stopwatch window_clock_;  // throughput since the previous log step
  int64_t window_tokens_ = 0;
  // The evaluation in progress: its step, batches, time so far and when progress last showed.
  int64_t eval_step_ = 0;
  int64_t eval_batches_ = 0;
  Stopwatch eval_clock_;
  double eval_shown_at_ = 0.0;
};

// Seconds between the progress lines of a long evaluation: 10, or FP8TRAIN_TEST_EVAL_PROGRESS_S
// (for tests; 0 shows every batch).
double eval_progress_seconds();

class TrainingLoop {
 public:
  TrainingLoop(TrainingJob& run, Progress& progress, StepLogger& logger, Checkpointer& checkpointer);

  // Trains from progress.step to train.steps, or until --stop-after or a signal (status
  // "stopped"/"interrupted", after a checkpoint). Leaves progress.step at the steps done.
  // Throws fp8t::Error (kTrainingFailed) when the loss is not finite (status "diverged").
  void run();

 private:
  StepResult train_step(int64_t step);
  // The one place a step's result is checked.
  void check_step(const StepResult& result, const LoggedStep& logged);
  // For the divergence message: the checkpoint to go back to, and how.
  std::string way_back(int64_t first_skipped) const;
  // Whether `step` (0-based) starts from a checkpoint's weights; then the loss sum before it
  // (a device copy), for check_checkpoint.
  std::optional<at::Tensor> loss_before_checked_step(int64_t step);
  // Judges the checkpoint the step started from by the step's own loss and gradient norm (one
  // host read) and writes the verdict row (lib/checkpoint/health.h).
  void check_checkpoint(const StepResult& result, const at::Tensor& loss_before);
  void evaluate_if_due(int64_t step);
  // Saves and returns true when the run stops after `step` before its last step.
  bool stop_early(int64_t step, bool stop_signal);

  TrainingJob& run_;
  Progress& progress_;
  StepLogger& logger_;
  Checkpointer& checkpointer_;
  checkpoint::CheckpointHealth health_;  // the verdict on each checkpoint, for the way back after a divergence
};

}  // namespace fp8t::train
