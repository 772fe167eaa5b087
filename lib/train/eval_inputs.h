// The inputs of `fp8train eval` (lib/train/evaluate.h), resolved and checked before anything
// is built: where the weights and the config come from, the config with the command's
// overrides, and the validation data (with the tokenizer/vocabulary checks).
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/config/loader.h"  // config::LoadedConfig, config::Override
#include "lib/data/dataset.h"   // data::Dataset
#include "lib/train/evaluate.h"  // EvalRequest

namespace fp8t::train {

struct WeightsSource {
  std::filesystem::path file;    // the checkpoint or the safetensors file
  bool checkpoint = false;       // a run folder's checkpoint (else safetensors)
  std::filesystem::path config;  // config.yaml (or a transformers config.json)
  bool hf_config = false;        // `config` is a config.json
  std::filesystem::path run;     // the run folder (checkpoints)
  std::optional<int64_t> expected_step;  // --step that checkpoint.pt must hold
  std::string kept;              // the kept checkpoints, for messages
};

// A run folder's config.yaml and checkpoint (the newest, or --step's), or a safetensors file
// and its config (--config, else config.yaml or config.json beside it). A run folder that a
// training run holds is read all the same; a note says so. Throws kBadInput naming the folder
// or file.
WeightsSource resolve_weights(const EvalRequest& request);

// The config with `overrides` applied and validated (a config.json: its model shape, the other
// keys at their defaults).
config::LoadedConfig load_eval_config(const WeightsSource& source, const std::vector<config::Override>& overrides);

// --data's files (validation only), or the config's validation data. Token files with a
// manifest.json (scripts/prepare_data.py) beside them are checked against the model's
// vocabulary and the run's training tokenizer first; every token id against model.vocab_size.
data::Dataset open_eval_data(const EvalRequest& request, const WeightsSource& source, const ExperimentConfig& cfg);

// The training step `fp8train export` recorded in a safetensors file's metadata, if any.
std::optional<int64_t> safetensors_step(const std::filesystem::path& file);

}  // namespace fp8t::train
