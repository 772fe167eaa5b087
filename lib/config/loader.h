// Loading an experiment: struct defaults < YAML file < command-line overrides, then validate().
//
// Every failure is one fp8t::Error with ExitCode::kBadInput whose message starts with the key
// path and where its value came from, e.g.
//   model.n_layer (configs/x.yaml:12): expected an integer >= 1, got 0
//   fp8.margin (--fp8-margin): expected an integer >= 0, got 'abc'
#pragma once

#include <map>     // std::map
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig

namespace fp8t {
namespace config {

// One command-line assignment: `--set model.n_layer=4` gives {"model.n_layer", "4", "--set"};
// `--fp8-margin 2` gives {"fp8.margin", "2", "--fp8-margin"}. Applied in order; the last wins.
struct Override {
  std::string key;
  std::string value;
  std::string origin;  // the flag, shown in error messages; empty means "--set"
};

// Where each key's value came from, for error messages.
class ConfigSources {
 public:
  // "configs/x.yaml:12", "--fp8-margin", "--set", or "default" when the key was never set.
  std::string origin(const std::string& key) const;
  // True when the key still holds its struct default.
  bool is_default(const std::string& key) const { return origins_.count(key) == 0; }
  void set(const std::string& key, std::string origin) { origins_[key] = std::move(origin); }
  // key -> origin for every key that was set (YAML or overrides).
  const std::map<std::string, std::string>& all() const { return origins_; }

 private:
  std::map<std::string, std::string> origins_;
};

struct LoadedConfig {
  ExperimentConfig config;
  ConfigSources sources;
};

// What the config is loaded for. A memory plan (`--dry-run --plan-*`) reads no data, so it
// needs no data.train_path; everything else is validated as for training.
enum class ConfigUse { kTrain, kPlan };

// Defaults < the YAML file at `yaml_path` (empty path: defaults only) < `overrides`, then
// validate(). Throws fp8t::Error(kBadInput) naming the file, key and origin.
LoadedConfig load(const std::string& yaml_path, const std::vector<Override>& overrides = {},
                  ConfigUse use = ConfigUse::kTrain);

// As load(), with the YAML given as text; `source_name` names it in messages ("<string>",
// "configs/default.yaml", ...). Empty or whitespace-only text means defaults only.
LoadedConfig load_from_string(const std::string& yaml_text, const std::string& source_name,
                              const std::vector<Override>& overrides = {}, ConfigUse use = ConfigUse::kTrain);

// The steps of load(), for callers that build a config in stages (no validation here).
// Reads YAML text into `out` (keys not present keep their current values).
void apply_yaml(const std::string& yaml_text, const std::string& source_name, LoadedConfig& out);
// Applies overrides in order.
void apply_overrides(const std::vector<Override>& overrides, LoadedConfig& out);

}  // namespace config
}  // namespace fp8t
