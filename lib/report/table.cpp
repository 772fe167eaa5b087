#include "lib/report/table.h"

#include <algorithm>  // std::stable_sort, std::min_element
#include <cmath>      // std::isfinite
#include <cstdio>     // std::snprintf
#include <set>        // std::set

#include "lib/run/console.h"  // run::format_count
#include "lib/util/error.h"   // FP8T_INPUT_CHECK

namespace fp8t::report {
namespace {

const std::set<std::string>& ignored_keys() {
  static const std::set<std::string> keys = {"run.name", "run.out_dir", "run.quiet", "run.overwrite"};
  return keys;
}

std::string printf_text(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

Cell number_cell(std::optional<double> v, const char* fmt) {
  if (!v || !std::isfinite(*v)) return v ? Cell{"nan", v} : Cell{};
  return Cell{printf_text(fmt, *v), v};
}

std::optional<double> summary_number(const RunFolder& run, const char* key) {
  if (run.summary.is_object() && run.summary.contains(key) && run.summary[key].is_number()) {
    return run.summary[key].get<double>();
  }
  return std::nullopt;
}

std::optional<double> last_value(const Series& s) {
  if (s.value.empty()) return std::nullopt;
  return s.value.back();
}

std::optional<double> min_value(const Series& s) {
  std::optional<double> best;
  for (double v : s.value) {
    if (std::isfinite(v) && (!best || v < *best)) best = v;
  }
  return best;
}

// The slot with the largest fraction of `field` over the run and the first log step that showed
// it: summary.json "fp8_worst" when the run finished (the step when the summary has one), else
// the metrics history.
Cell worst_slot_cell(const RunFolder& run, const char* summary_list, const std::vector<double> SlotSeries::*field) {
  std::string slot;
  std::optional<double> frac;
  std::optional<int64_t> step;
  if (run.summary.is_object() && run.summary.contains("fp8_worst")) {
    const auto& list = run.summary["fp8_worst"].value(summary_list, nlohmann::json::array());
    if (!list.empty() && list[0].is_object()) {
      slot = list[0].value("slot", "");
      if (list[0].contains("fraction") && list[0]["fraction"].is_number()) frac = list[0]["fraction"].get<double>();
      if (list[0].contains("step") && list[0]["step"].is_number_integer()) step = list[0]["step"].get<int64_t>();
    }
  } else {
    for (const auto& s : run.fp8.slots) {
      const std::vector<double>& series = s.*field;
      for (size_t i = 0; i < series.size(); ++i) {
        if (!std::isfinite(series[i]) || (frac && series[i] <= *frac)) continue;
        frac = series[i], slot = s.slot;
        step = i < run.fp8.steps.size() ? std::optional<int64_t>(run.fp8.steps[i]) : std::nullopt;
      }
    }
  }
  if (!frac) return Cell{};
  if (*frac == 0.0) return Cell{"none (0%)", 0.0};  // no slot to single out
  std::string text = slot + " " + printf_text("%.3g%%", *frac * 100.0);
  if (step) text += " (step " + std::to_string(*step) + ")";
  return Cell{text, *frac, slot};
}

Cell memory_cell(std::optional<double> bytes) {
  if (!bytes) return Cell{};
  return Cell{printf_text("%.1f MiB", *bytes / (1024.0 * 1024.0)), bytes};
}

// A mixture of experts at its last log row: "h3.mlp 1.31x", the least balanced layer's most loaded
// expert over the mean; empty for a dense run.
Cell expert_balance_cell(const RunFolder& run) {
  if (!run.expert_max_over_mean) return Cell{};
  return Cell{run.expert_layer + " " + printf_text("%.2fx", *run.expert_max_over_mean), run.expert_max_over_mean};
}

Cell steps_cell(const RunFolder& run) {
  std::optional<double> steps = summary_number(run, "steps");
  if (!steps && !run.loss.step.empty()) steps = static_cast<double>(run.loss.step.back());
  return number_cell(steps, "%.0f");
}

std::vector<Cell> outcome_cells(const RunFolder& run) {
  auto or_else = [](std::optional<double> a, std::optional<double> b) { return a ? a : b; };
  std::optional<double> tok_s = summary_number(run, "tokens_per_s");
  if (!tok_s && !run.tokens_per_s.value.empty()) tok_s = run.tokens_per_s.value.back();
  return {
      Cell{run.status, std::nullopt},
      steps_cell(run),
      number_cell(or_else(summary_number(run, "best_val_loss"), min_value(run.val_loss)), "%.4f"),
      number_cell(or_else(summary_number(run, "final_val_loss"), last_value(run.val_loss)), "%.4f"),
      number_cell(or_else(summary_number(run, "final_loss"), last_value(run.loss)), "%.4f"),
      tok_s ? Cell{run::format_count(*tok_s), tok_s} : Cell{},
      memory_cell(summary_number(run, "peak_memory_bytes")),
      worst_slot_cell(run, "most_saturated", &SlotSeries::saturated),
      worst_slot_cell(run, "most_underflow", &SlotSeries::underflow),
      expert_balance_cell(run),
  };
}

}  // namespace

const std::vector<std::string>& outcome_columns() {
  static const std::vector<std::string> cols = {"status",       "steps",       "best_val_loss",
                                                "final_val_loss", "final_loss", "tokens_per_s",
                                                "peak_memory",  "most_saturated", "most_underflow",
                                                "expert_balance"};
  return cols;
}

std::vector<std::string> differing_keys(const std::vector<RunFolder>& runs) {
  std::set<std::string> all;
  for (const auto& r : runs) {
    if (!r.is_run) continue;
    for (const auto& [k, v] : r.config) all.insert(k);
  }
  std::vector<std::string> out;
  for (const auto& key : all) {
    if (ignored_keys().count(key)) continue;
    std::set<std::string> values;
    bool absent = false;
    for (const auto& r : runs) {
      if (!r.is_run) continue;
      const auto it = r.config.find(key);
      if (it == r.config.end()) absent = true;
      else values.insert(it->second);
    }
    if (values.size() > 1 || (absent && !values.empty())) out.push_back(key);
  }
  return out;
}

Table build_table(const std::vector<RunFolder>& runs) {
  Table t;
  const std::vector<std::string> keys = differing_keys(runs);
  t.columns.push_back({"run", false});
  for (const auto& k : keys) t.columns.push_back({k, true});
  for (const auto& k : outcome_columns()) t.columns.push_back({k, false});
  for (const auto& run : runs) {
    if (!run.is_run) continue;
    std::vector<Cell> row{Cell{run.name, std::nullopt}};
    for (const auto& k : keys) {
      const auto it = run.config.find(k);
      row.push_back(it == run.config.end() ? Cell{"-", std::nullopt} : Cell{it->second, std::nullopt});
    }
    for (auto& c : outcome_cells(run)) row.push_back(std::move(c));
    t.rows.push_back(std::move(row));
    t.runs.push_back(&run);
  }
  return t;
}

void sort_table(Table& table, const std::string& column, bool descending) {
  size_t col = table.columns.size();
  std::string names;
  for (size_t i = 0; i < table.columns.size(); ++i) {
    if (table.columns[i].key == column) col = i;
    names += (i ? ", " : "") + table.columns[i].key;
  }
  FP8T_INPUT_CHECK(col < table.columns.size(), "--sort: no column '", column, "'; the columns are: ", names);
  std::vector<size_t> order(table.rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Empty cells and NaN sort last in either direction.
  auto absent = [](const Cell& c) { return c.missing() || (c.number && !std::isfinite(*c.number)); };
  auto less = [&](size_t a, size_t b) {
    const Cell& x = table.rows[a][col];
    const Cell& y = table.rows[b][col];
    if (absent(x) != absent(y)) return absent(y);
    if (absent(x)) return false;
    if (x.number && y.number) return descending ? *x.number > *y.number : *x.number < *y.number;
    if (x.number != y.number) return static_cast<bool>(x.number);  // numbers before text
    return descending ? x.text > y.text : x.text < y.text;
  };
  std::stable_sort(order.begin(), order.end(), less);
  Table sorted{table.columns, {}, {}};
  for (size_t i : order) {
    sorted.rows.push_back(table.rows[i]);
    sorted.runs.push_back(table.runs[i]);
  }
  table = std::move(sorted);
}

}  // namespace fp8t::report
