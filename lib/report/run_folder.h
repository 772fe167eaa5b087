// Reading a run folder back (the files lib/run/run_dir.h lists) for `fp8train report`.
//
// Nothing here throws on a bad folder: a report over a sweep shows every run it can and says
// what is wrong with the others (RunFolder::problems), so one broken folder never hides the rest.
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

namespace fp8t::report {

// One metric over steps; a null value in metrics.jsonl (a non-finite number) reads as NaN.
struct Series {
  std::vector<int64_t> step;
  std::vector<double> value;
};

// One FP8 tensor slot's statistics on the log steps of a --fp8-stats run. Saturated and
// underflow are fractions of the tensor's elements (0..1).
struct SlotSeries {
  std::string slot;
  std::string format;
  std::vector<double> amax, scale, saturated, underflow;  // aligned with Fp8History::steps
};

struct Fp8History {
  std::vector<int64_t> steps;
  std::vector<SlotSeries> slots;  // in the order of the first row that names them
};

struct RunFolder {
  std::filesystem::path path;
  std::string name;  // summary.json "run", else the folder's name
  // False for a folder that is not a run folder (or cannot be read): it has no row.
  bool is_run = false;
  // summary.json "status" (completed, diverged, failed, stopped, interrupted, ...); when
  // summary.json is missing, "unfinished" if no process holds the folder's lock (the run
  // stopped without writing it), else "running".
  std::string status;
  std::vector<std::string> problems;          // what the reader could not use, for the user
  std::map<std::string, std::string> config;  // config.yaml flattened: "section.key" -> value
  nlohmann::json summary;                     // summary.json, or null
  Series loss, val_loss, lr, grad_norm, tokens_per_s;
  Fp8History fp8;
  // A mixture of experts: the least balanced layer of the last log row's "moe" record, its most
  // loaded expert's tokens over the mean ("h3.mlp", 1.31); empty for a dense run.
  std::string expert_layer;
  std::optional<double> expert_max_over_mean;
};

// Reads config.yaml, summary.json and metrics.jsonl of `dir`. A torn last line of
// metrics.jsonl (a run still writing) is skipped silently; other unreadable lines are skipped
// and counted in problems.
RunFolder read_run_folder(const std::filesystem::path& dir);

// A YAML document's scalars as "a.b.c" -> value text; sequences and maps below the leaves
// are written in flow style ("[1, 0, 0]"). Throws YAML::Exception on a syntax error.
std::map<std::string, std::string> flatten_yaml(const std::string& text);

}  // namespace fp8t::report
