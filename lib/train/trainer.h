// The training run: config -> data -> model -> FP8 rewrite -> (process group) -> loop -> run folder.
//
// Nothing is written before the config, the data and the model have been checked, so bad input
// leaves the disk untouched. run_training (trainer.cpp) is a short sequence of phases, each in its
// own file with the state it owns:
//   setup        run_setup.h         device, run-folder check, data, model + FP8 rewrite, plan; the job
//   resume       train_checkpoint.h  Checkpointer::resume
//   step, log,   training_loop.h     TrainingLoop (train_step, check_step, evaluate_if_due, stop_early),
//   eval                             StepLogger (the metrics row and the status line)
//   checkpoint   train_checkpoint.h  Checkpointer::due / save
//   finish       progress.h          Progress (totals across resumes) -> summary.json
// The loop reads top to bottom: micro-batches (forward, backward), FP8 scale update, clip,
// optimizer step, one status line per log interval. The device is read on the host only on log,
// eval and checkpoint steps.
#pragma once

#include <c10/core/Device.h>  // at::Device
#include <nlohmann/json.hpp>  // nlohmann::json

#include <string>  // std::string

#include "lib/config/loader.h"  // config::LoadedConfig
#include "lib/dist/launch.h"    // dist::LaunchInfo

namespace fp8t {
namespace train {

struct TrainOptions {
  bool resume = false;   // continue the run folder's checkpoint
  // With resume: the checkpoint to continue instead of checkpoint.pt: a step the run folder
  // keeps ("12", train.keep_checkpoints) or a checkpoint file.
  std::string resume_from;
  bool dry_run = false;  // validate, build, print the plan; write nothing
  // Train at most this many steps in this invocation, then save a checkpoint and stop
  // (status "stopped", exit 0); continue later with resume. 0: no limit. For time-limited
  // job slots.
  int64_t stop_after = 0;
  // Data-parallel placement (from torchrun's environment); a single process by default.
  // Every rank trains on its own rows of each global batch; only rank 0 writes the run folder.
  dist::LaunchInfo launch;
};

// Runs (or dry-runs) the experiment. Returns the summary (also written to summary.json).
// Throws fp8t::Error: kBadInput for bad data/run folder, kTrainingFailed when the loss
// becomes non-finite or a file of the run folder cannot be written (disk full: summary.json
// says why when it can still be written, else the message does), kInterrupted on
// SIGINT/SIGTERM (after saving a checkpoint). A resume of a run that trained every step but
// could not write summary.json writes it from the final checkpoint and returns.
nlohmann::json run_training(const config::LoadedConfig& loaded, const TrainOptions& options);

// "cuda:<local_rank>" when run.device is auto and a GPU is visible, else "cpu" (cuda requested
// without a GPU is a kBadInput error naming run.device).
at::Device resolve_device(DeviceKind kind, int local_rank = 0);

}  // namespace train
}  // namespace fp8t
