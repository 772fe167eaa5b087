// Phase 1 of a training run (lib/train/trainer.h): the checks and the construction that happen
// before anything is written — the device, the run folder's state, the data, the model with its
// FP8 rewrite — then the plan lines, and (for torchrun) joining the data-parallel job.
#pragma once

#include <c10/core/Device.h>  // c10::Device
#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr, std::unique_ptr

#include "lib/config/loader.h"  // config::LoadedConfig
#include "lib/config/parallel_layout.h"  // ParallelLayout
#include "lib/data/dataset.h"   // data::Dataset
#include "lib/run/run_dir.h"    // RunDir::Mode
#include "lib/step/session.h"   // Session
#include "lib/train/trainer.h"  // TrainOptions

namespace fp8t::train {

// Everything a step needs, built once by setup_job().
struct TrainingJob {
  const ExperimentConfig& cfg;
  const TrainOptions& options;
  c10::Device device;
  run::RunDir::Mode mode;                  // create, overwrite or resume the run folder
  data::Dataset data;
  std::unique_ptr<step::Session> session;
  std::shared_ptr<dist::Communicator> comm = nullptr;  // null for a single process (join_job sets it)
  // This process's rank, the job's ranks and dist.zero; rank 0 is the only one that writes the
  // run folder (layout.is_rank0()).
  ParallelLayout layout;
  int64_t tokens_per_step = 0;  // over all ranks

  fp8::Scaling* scaling() const { return session->scaling(); }  // null unless fp8
};

// Resolves the device, checks the run folder (read-only), opens the data, builds the model and
// logs the plan. Writes nothing; throws fp8t::Error (kBadInput) on bad input.
TrainingJob setup_job(const config::LoadedConfig& loaded, const TrainOptions& options);

// The summary of --dry-run.
nlohmann::json dry_run_plan(const TrainingJob& run);

// Joins the data-parallel job when launched by torchrun, then allocates the optimizer state
// (Session::prepare_training).
void join_job(TrainingJob& run);

}  // namespace fp8t::train
