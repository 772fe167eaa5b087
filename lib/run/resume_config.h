// What a resume may change. A resumed run continues the checkpoint with the config given now:
//   - model.*, data.* and precision describe what the checkpoint holds: a change is bad input
//     (exit 2), naming every changed key;
//   - anything else (train.lr, train.steps, train.micro_batch_size, fp8 recipe keys, ...) may
//     change on purpose: the run folder's config.yaml it replaces is kept as
//     config.resume-<step>.yaml and the log lists each change ("train.lr: 0.003 -> 0.001").
// run.* keys (name, folder, quiet, ...) are how the run is invoked, not what it trains: ignored.
#pragma once

#include <cstdint>  // int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/run/run_dir.h"        // RunDir

namespace fp8t::run {

struct ConfigChange {
  std::string key;
  std::string before;
  std::string after;
  bool allowed = true;  // false for model.*, data.*, precision
};

// The keys whose values differ (run.* left out), in schema order.
std::vector<ConfigChange> config_changes(const ExperimentConfig& before, const ExperimentConfig& after);

// On resume, before the checkpoint is loaded: compares the run folder's config.yaml with `now`
// and refuses (kBadInput, naming every such key) changes that are not allowed. Returns the
// allowed changes. No config.yaml (or an unreadable one): nothing to compare, returns {}.
std::vector<ConfigChange> check_resume_config(const RunDir& dir, const ExperimentConfig& now);

// After the checkpoint at `step` was loaded (rank 0): when anything changed, keeps the old
// config.yaml as config.resume-<step>.yaml and logs each change.
void record_resume_config(const RunDir& dir, const std::vector<ConfigChange>& changes, int64_t step);

}  // namespace fp8t::run
