// The HTML report: one self-contained page (table, curves, FP8 heatmaps) that works offline.
//
// Chart.js and the page's script and style are embedded into the program at build time and
// written inline, and the runs' data is inline JSON: the page references no other file and
// makes no network request. Text from run folders is HTML-escaped, and the inline JSON cannot
// close its <script> element.
#pragma once

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/report/run_folder.h"  // RunFolder
#include "lib/report/table.h"       // Table

namespace fp8t::report {

// `runs` are all inputs (folders that are not runs are listed under the problems); `table`
// is build_table(runs), possibly sorted. `generated` is shown under the title (e.g. a date).
std::string to_html(const std::vector<RunFolder>& runs, const Table& table, const std::string& generated);

// "&<>\"'" as entities.
std::string html_escape(const std::string& text);

// The runs' curves and FP8 statistics as the JSON the page's script reads (non-finite numbers
// as null), with every '<' written as \u003c so that it can sit inside a <script> element.
std::string chart_data_json(const std::vector<const RunFolder*>& runs);

}  // namespace fp8t::report
