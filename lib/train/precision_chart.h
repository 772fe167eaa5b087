// The precision chart of a run: for the run as configured, the precision of the six things the
// classic low-precision comparison chart lists (compute, communication, weights, master weights,
// weight gradients, optimizer states), plus the loss scaling.
//
// Every entry is read from the live objects of a Session, never from a table kept beside them:
// which modules of the model are FP8 (and the formats of their scaling slots and the recipe's
// GEMM overrides), why a layer was kept out of FP8 (the rewrite report), the autocast dtype,
// the parameter and gradient dtypes, the optimizer's master copies and state (before the
// optimizer exists: the rules its constructor applies), the gradient sync and the communicator
// (before the process group exists: the planned number of ranks), and the loss scaler.
//
// Shown by `fp8train --dry-run`, logged at the start of train.log, and stored in summary.json
// as "precision_chart".
#pragma once

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstdint>  // SIZE_MAX
#include <string>   // std::string
#include <vector>  // std::vector

namespace fp8t::step {
class Session;
}  // namespace fp8t::step

namespace fp8t::train {

// Tensors or layers of one row that share a precision (and a reason for it).
struct ChartGroup {
  std::string precision;           // "FP8", "BF16", "FP32", "FP16", "none", "dynamic"
  std::string detail;              // what they are, and why they have this precision
  std::vector<std::string> names;  // the layers or tensors (may be empty)
};

struct ChartRow {
  std::string key;   // JSON key: "compute_gemm", "communication", ...
  std::string item;  // "compute (GEMM)", "communication", ...
  std::vector<ChartGroup> groups;
  // The distinct precisions of the groups, in order, joined by " + " (e.g. "FP8 + BF16").
  std::string summary() const;
};

struct PrecisionChart {
  std::string precision;  // the run's `precision`
  std::string device;
  std::vector<ChartRow> rows;

  // The row with JSON key `key` (throws fp8t::Error if there is none).
  const ChartRow& row(const std::string& key) const;
  // A table for the console and train.log: one line per group, names compressed
  // ("blocks.*.attn.c_attn x12").
  std::string to_string() const;
  // {"precision", "device", <key>: {"item", "precision": summary, "groups": [{"precision",
  //  "detail", "count", "names"}]}} with every name listed.
  nlohmann::json to_json() const;
};

// The chart of `session` as it stands. `planned_world_size`: the number of ranks the job will
// have, used only while the session has no communicator yet (a dry run).
PrecisionChart precision_chart(const step::Session& session, int planned_world_size = 1);

// "h0.attn.c_attn", "h1.attn.c_attn" -> "h*.attn.c_attn x2": block indices (a path component
// "12" or "h12") become '*', names that then coincide are counted; first-seen order. At most
// `max_entries` entries, then ", and N more".
std::string compress_names(const std::vector<std::string>& names, size_t max_entries = SIZE_MAX);

}  // namespace fp8t::train
