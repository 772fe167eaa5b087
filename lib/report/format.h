// The report table as text for people (aligned columns, markdown) and for scripts (TSV, JSON).
#pragma once

#include <string>  // std::string

#include "lib/report/table.h"  // Table

namespace fp8t::report {

// Aligned columns under a header and a rule; empty cells print as "-".
std::string to_text(const Table& table);

// A GitHub-flavoured markdown table ('|' in cells escaped).
std::string to_markdown(const Table& table);

// Tab-separated, a header line of column keys; numbers unrounded (%.17g), empty cells empty;
// tabs and newlines inside cells become spaces.
std::string to_tsv(const Table& table);

// A JSON array, one object per row: column key -> number (unrounded), text, or null; plus
// "path" (the run folder) and "problems" (what the reader could not use).
std::string to_json(const Table& table);

}  // namespace fp8t::report
