// The config flags of the command line. Each given flag appends an Override (loader.h) in
// command-line order, so a later flag wins over an earlier one:
//   --precision, --steps, --seed, --run-name, --out-dir, --device, --fp8-margin,
//   --fp8-interval, --fp8-format, --fp8-amax-history-len, --fp8-amax-compute-algo,
//   --fp8-override-linear-precision, --fp8-stats, --quiet, --overwrite,
//   and repeatable --set KEY=VALUE for any key of the experiment file.
// Values are checked when the overrides are applied (load()), so errors name the flag.
#pragma once

#include <string>  // std::string
#include <vector>  // std::vector

#include <CLI/CLI.hpp>  // CLI::App

#include "lib/config/loader.h"  // Override

namespace fp8t {
namespace config {

// One dedicated flag: `--fp8-margin` sets `fp8.margin`. `is_switch` flags take no value and
// set the (boolean) key to true.
struct ConfigFlag {
  const char* flag;
  const char* key;
  bool is_switch;
};
const std::vector<ConfigFlag>& config_flags();

// Splits `--set` text "key=value" at the first '='. Throws fp8t::Error(kBadInput) when there
// is no '=' or the key is empty.
Override parse_set_argument(const std::string& text);

// Registers the config flags on `app` (in an option group "Experiment config"). `out` must
// outlive the parse.
void add_config_flags(CLI::App& app, std::vector<Override>* out);

}  // namespace config
}  // namespace fp8t
