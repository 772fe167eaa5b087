// Whether a config fits a cluster, per rank, and what would make it fit: the answer of
// `fp8train --dry-run`, for this machine or, with --plan-world-size, --plan-device-memory and
// --plan-zero, for a cluster it is not part of. The estimate is lib/plan/resources.h's (a lower
// bound); each lever is that estimate again with one change to the config or the cluster.
#pragma once

#include <optional>  // std::optional
#include <ostream>   // std::ostream
#include <string>    // std::string
#include <vector>    // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/plan/resources.h"     // MemoryEstimate

namespace fp8t::plan {

// The devices a config is planned for.
struct PlanTarget {
  int world_size = 1;       // data-parallel ranks, one device each
  double device_bytes = 0;  // memory of one device; 0: unknown (no verdicts, e.g. after an out-of-memory error)
  std::string device_name;  // "cuda:0", "80 GiB devices"
};

// One change, applied alone to the planned config (or all of them, `together`).
struct Lever {
  std::string setting;     // "dist.zero 3", "train.recompute block", "32 ranks", ...
  std::string cost;        // what it costs in speed (measured where the README has a figure)
  double total_bytes = 0;  // the estimate per rank with the change
  double saved_bytes = 0;  // the estimate per rank without it, minus with it (> 0)
  bool fits = false;       // total_bytes <= the device's memory
};

struct MemoryPlan {
  ExperimentConfig cfg;  // the config planned
  PlanTarget target;
  MemoryEstimate estimate;
  bool fits = false;
  std::vector<Lever> levers;      // every change that saves memory, in a fixed order
  std::optional<Lever> together;  // when no lever alone fits: the config changes combined
};

// Throws fp8t::Error (kBadInput) for a target that makes no sense with the config (a
// dist.shard_group_size that does not divide the ranks under dist.zero 3).
MemoryPlan plan_memory(const ExperimentConfig& cfg, const PlanTarget& target);

// The per-rank table (bytes per parameter and GiB by category), the line "verdict: fits ..." or
// "verdict: does not fit ...", and when it does not fit the levers, each with its GiB.
std::string format_memory_plan(const MemoryPlan& plan);

// The levers in one sentence, for error messages: "Levers (each alone): dist.zero 1: 44.9 GiB
// less per rank (fits); ...".
std::string format_levers(const MemoryPlan& plan);

// The dry run's answer: writes format_memory_plan to `out`; a config that does not fit is
// kBadInput (exit 2), as it is before a real run.
void print_memory_plan(const ExperimentConfig& cfg, const PlanTarget& target, std::ostream& out);

}  // namespace fp8t::plan
