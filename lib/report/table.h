// The report table: one row per run, the config keys that differ between the runs, then the
// outcome (status, steps, losses, throughput, memory, worst FP8 slots).
#pragma once

#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include "lib/report/run_folder.h"  // RunFolder

namespace fp8t::report {

struct Column {
  std::string key;      // "run", a config key such as "fp8.margin", or an outcome such as "best_val_loss"
  bool config = false;  // a differing config key
};

struct Cell {
  std::string text;               // for people: rounded, with units
  std::optional<double> number;   // the exact value of a numeric cell (sorting, --tsv, --json)
  std::string slot = {};          // the FP8 slot the number belongs to (worst-slot columns)
  bool missing() const { return text.empty() && !number; }
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // one per run, columns in order
  std::vector<const RunFolder*> runs;   // the run of each row
};

// Config keys whose values are not the same in every run (a key missing from some run counts
// as differing), sorted. Keys that never change what a run computes are left out: run.name
// (the row's name), run.out_dir, run.quiet, run.overwrite.
std::vector<std::string> differing_keys(const std::vector<RunFolder>& runs);

// The table of the runs with is_run set, in the given order.
Table build_table(const std::vector<RunFolder>& runs);

// Sorts the rows by `column` (a column key): numbers ascending, then text; empty cells last.
// `descending` reverses the order of the non-empty cells. Throws fp8t::Error (kBadInput)
// listing the columns when there is no such column.
void sort_table(Table& table, const std::string& column, bool descending);

// The outcome columns, in table order.
const std::vector<std::string>& outcome_columns();

}  // namespace fp8t::report
