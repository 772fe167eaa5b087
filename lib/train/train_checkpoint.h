// The checkpoint phase of a training run: what goes into checkpoint.pt (model, optimizer, FP8
// scaling state, CPU RNG, data position, progress totals), when it is written, and resuming
// from it. Only rank 0 writes checkpoint.pt; every rank reads on resume. ZeRO-1: every rank
// also writes its optimizer shard first, and checkpoint.pt is their manifest
// (lib/checkpoint/optimizer_state.h); ZeRO-3: the shards hold the rank's parts of the weights
// too, and checkpoint.pt holds no weights. Resuming on another number of ranks, zero level or
// shard group size reshards the state.
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include <ATen/core/Tensor.h>  // at::Tensor

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/checkpoint/checkpoint.h"  // Checkpoint
#include "lib/checkpoint/history.h"  // CheckpointHistory
#include "lib/train/log_window.h"  // LogWindow
#include "lib/train/progress.h"    // Progress
#include "lib/run/run_dir.h"       // RunDir
#include "lib/train/run_setup.h"   // TrainingJob
#include "lib/step/step_health.h"  // StepHealth::Counts
#include "lib/util/timer.h"        // Stopwatch

namespace fp8t::train {

// The FP32 master weights of a checkpoint by name ("model.<name>" of checkpoint.pt, or under
// ZeRO-3 assembled from the shard files in `folder` that its manifest lists), on the CPU.
std::vector<std::pair<std::string, at::Tensor>> checkpoint_model_tensors(const checkpoint::Checkpoint& ck,
                                                                        const std::filesystem::path& folder);

// The FP8 recipe state a checkpoint holds (its "fp8.*" tensors, as fp8::Scaling::state_dict names them).
std::map<std::string, at::Tensor> checkpoint_fp8_state(const checkpoint::Checkpoint& ck);

class Checkpointer {
 public:
  Checkpointer(TrainingJob& run, const run::RunDir& dir);

  // Continues from checkpoint.pt, or from the checkpoint --resume-from names: restores the
  // model, optimizer, FP8 and RNG state and the data position into `run`, and the totals into
  // `progress`. Refuses (kBadInput), before anything is loaded or written, data files that are
  // not those the checkpoint was trained on (unless run.accept_data_change) and a ZeRO
  // checkpoint whose shard files are missing (naming the complete older ones). Returns false
  // when that checkpoint ends the run (train.steps) and summary.json was never written (a write
  // that failed): final_summary() is then what the run would have written. Throws fp8t::Error (kBadInput) when the checkpoint does not fit the job, or there
  // is nothing left to train.
  bool resume(Progress& progress);
  // The summary the final checkpoint recorded (after resume() returned false).
  const nlohmann::json& final_summary() const { return final_summary_; }

  // Whether the scheduled checkpoint falls after `step` (1-based: steps done): every
  // train.checkpoint_interval steps, when train.checkpoint_every_min minutes have passed since
  // the last one (rank 0's clock; in a job read at log steps, so that every rank saves together),
  // and after the last step.
  bool due(int64_t step) const;

  // Writes checkpoint.pt after `step` steps done, with the totals of `progress` and the log
  // window so far (every rank's: in a job all of them call it; rank 0 writes); the one it
  // replaces is kept as checkpoint.step-<S>.pt, up to train.keep_checkpoints in all, and the
  // newest known healthy one until a newer one is (CheckpointHistory). Never from non-finite state: when the
  // run has diverged (StepHealth) or a weight is not finite, nothing is written (a warning says
  // so). A `scheduled` checkpoint (due(), not the last step) is not written while steps are
  // being skipped either: it would hold the weights of the step before the streak again and
  // push an older checkpoint out. A write that fails (disk full, I/O error) throws
  // kTrainingFailed: the previous checkpoint is intact.
  void save(int64_t step, const Progress& progress, const LogWindow& window, bool scheduled = false);

  // The checkpoints this run can go back to.
  const checkpoint::CheckpointHistory& history() const { return history_; }
  // The checkpoint of `step` was judged by its next step (lib/checkpoint/health.h): the rotation
  // keeps the newest healthy one.
  void judged(int64_t step, bool healthy) { history_.judged(step, healthy); }

 private:
  // Why the state must not be written ("" when it may).
  std::string unsafe_state(const step::StepHealth::Counts& health) const;
  // ZeRO-1: every rank writes its optimizer shard; returns the manifest for checkpoint.pt (every
  // rank learns every shard's CRC32C). A rank that fails makes all of them throw kTrainingFailed.
  nlohmann::json save_shards(int64_t step);

  TrainingJob& run_;
  const run::RunDir& dir_;
  std::filesystem::path path_;
  Stopwatch since_save_;  // for train.checkpoint_every_min
  checkpoint::CheckpointHistory history_;
  // The data files the run reads (job_fingerprint.h data_record), taken once at the start: each
  // checkpoint records them, a resume compares them with its checkpoint's.
  nlohmann::json data_record_;
  nlohmann::json final_summary_;
};

}  // namespace fp8t::train
