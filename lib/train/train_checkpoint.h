// The checkpoint phase of a training run: what goes into checkpoint.pt (model, optimizer, FP8
// scaling state, CPU RNG, data position, progress totals), when it is written, and resuming
// from it. Only rank 0 writes; every rank reads on resume.
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path

#include "lib/train/progress.h"   // Progress
#include "lib/train/run_dir.h"    // RunDir
#include "lib/train/run_setup.h"  // Run

namespace fp8t::train {

class Checkpointer {
 public:
  Checkpointer(Run& run, const RunDir& dir);

  // Continues the run folder's checkpoint: restores the model, optimizer, FP8 and RNG state and
  // the data position into `run`, and the totals into `progress`. Throws fp8t::Error
  // (kBadInput) when the checkpoint does not fit the job or there is nothing left to train.
  void resume(Progress& progress);

  // Whether the scheduled checkpoint falls after `step` (1-based: steps done): every
  // train.checkpoint_interval steps and after the last step.
  bool due(int64_t step) const;

  // Writes checkpoint.pt after `step` steps done, with the totals of `progress` (rank 0 only; a
  // no-op elsewhere).
  void save(int64_t step, const Progress& progress);

 private:
  Run& run_;
  const RunDir& dir_;
  std::filesystem::path path_;
};

}  // namespace fp8t::train
