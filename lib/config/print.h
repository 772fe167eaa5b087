// Printing configs: the resolved experiment file (`--print-config`, the run folder's
// config.yaml) and the listing of every key (`--help`, docs).
#pragma once

#include <string>  // std::string

#include "lib/config/experiment.h"  // ExperimentConfig

namespace fp8t {
namespace config {

// Every key with its resolved value, sections in schema order; load_from_string(to_yaml(c))
// gives back a config equal to c.
std::string to_yaml(const ExperimentConfig& config);

// For precision fp8: YAML comment lines saying which recipe keys take effect under fp8.recipe
// and which are ignored (lib/config/fp8_recipe_fields.h); "" for other precisions. --print-config
// appends them to to_yaml (comments, so the printed file still reads back).
std::string recipe_note(const ExperimentConfig& config);

// A table of every key: key, type, default, help (one line each, aligned columns).
std::string describe_keys();

}  // namespace config
}  // namespace fp8t
