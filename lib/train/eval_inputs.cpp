#include "lib/train/eval_inputs.h"

#include <spdlog/spdlog.h>  // spdlog::info

#include <cstdint>       // int64_t
#include <fstream>       // std::ifstream
#include <map>           // std::map
#include <system_error>  // std::error_code

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/config/print.h"          // config::to_yaml
#include "lib/data/data_file.h"        // data::expand_data_paths
#include "lib/data/token_manifest.h"   // data::manifests_beside
#include "lib/model/hf_config.h"       // model::hf_model_section
#include "lib/model/safetensors.h"     // model::read_safetensors_metadata
#include "lib/run/checkpoint_files.h"  // kCheckpointFile, kept_checkpoints, describe_kept
#include "lib/run/run_dir.h"           // RunDir::writer_pid, temporary_prefix
#include "lib/util/error.h"            // FP8T_INPUT_CHECK

namespace fs = std::filesystem;

namespace fp8t::train {

namespace {

// An absolute folder path without a trailing separator ("runs/x/" -> ".../runs/x").
fs::path folder_path(const std::string& arg) {
  fs::path p = fs::absolute(arg).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p;
}

// A run folder that a training run holds is read all the same: checkpoint.pt is replaced
// atomically, so it is always a complete checkpoint, but perhaps not for long.
void note_writer(const fs::path& run) {
  const std::optional<std::string> pid = run::RunDir::writer_pid(run);
  if (!pid) return;
  const std::string prefix = run::temporary_prefix(run / run::kCheckpointFile);
  bool writing = false;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(run, ec)) {
    writing = writing || entry.path().filename().string().rfind(prefix, 0) == 0;
  }
  spdlog::info("run folder {} is in use by pid {} (a run writes it); {}", run.string(), *pid,
               writing ? "a new checkpoint.pt is being written now: evaluating the newest complete one (run eval "
                         "again when it is written)"
                       : "evaluating its newest complete checkpoint");
}

WeightsSource run_folder_source(const EvalRequest& r) {
  WeightsSource s;
  s.run = folder_path(r.run_dir);
  std::error_code ec;
  FP8T_INPUT_CHECK(fs::is_directory(s.run, ec), "--run ", r.run_dir, ": no such folder");
  s.config = s.run / "config.yaml";
  FP8T_INPUT_CHECK(fs::is_regular_file(s.config, ec), "--run ", r.run_dir, " is not a run folder (no config.yaml)");
  note_writer(s.run);
  s.checkpoint = true;
  s.kept = run::describe_kept(run::kept_checkpoints(s.run));
  const fs::path newest = s.run / run::kCheckpointFile;
  if (!r.step) {
    FP8T_INPUT_CHECK(fs::is_regular_file(newest, ec), "--run ", r.run_dir, ": no checkpoint: ", newest.string(),
                     " does not exist (the folder keeps ", s.kept, "; a run writes checkpoint.pt when it ends, "
                     "every train.checkpoint_interval steps and when stopped)");
    s.file = newest;
    return s;
  }
  FP8T_INPUT_CHECK(*r.step >= 0, "--step ", *r.step, ": expected a step >= 0");
  const std::map<int64_t, fs::path> kept = run::kept_checkpoints(s.run);
  if (const auto it = kept.find(*r.step); it != kept.end()) {
    s.file = it->second;
    return s;
  }
  FP8T_INPUT_CHECK(fs::is_regular_file(newest, ec), "--step ", *r.step, ": the run folder ", s.run.string(),
                   " has no checkpoint of step ", *r.step, "; it keeps ", s.kept, " and no checkpoint.pt");
  s.file = newest;  // if it holds that step (checked once loaded)
  s.expected_step = *r.step;
  return s;
}

WeightsSource safetensors_source(const EvalRequest& r) {
  WeightsSource s;
  s.file = fs::absolute(r.weights);
  std::error_code ec;
  FP8T_INPUT_CHECK(!fs::is_directory(s.file, ec), "--weights ", r.weights,
                   " is a folder; name the safetensors file in it (e.g. ", (s.file / "model.safetensors").string(), ")");
  FP8T_INPUT_CHECK(fs::is_regular_file(s.file, ec), "--weights ", r.weights, ": no such file");
  if (!r.config.empty()) {
    s.config = fs::absolute(r.config);
    FP8T_INPUT_CHECK(fs::is_regular_file(s.config, ec), "--config ", r.config, ": no such file");
    s.hf_config = s.config.extension() == ".json";
    return s;
  }
  for (const char* name : {"config.yaml", "config.json"}) {
    const fs::path beside = s.file.parent_path() / name;
    if (!fs::is_regular_file(beside, ec)) continue;
    s.config = beside;
    s.hf_config = beside.extension() == ".json";
    spdlog::info("eval: the model shape of {} from {}", s.file.string(), beside.string());
    return s;
  }
  FP8T_THROW(ExitCode::kBadInput, "--weights ", r.weights, ": the model shape is unknown: give --config (the run's "
             "config.yaml), or keep the config.yaml or config.json (`export --names hf`) beside the file");
}

// Token files with a manifest.json beside them: its vocabulary must fit the model, and it must be
// the tokenizer of the run's training tokens when those have a manifest too.
void check_manifests(const std::vector<std::string>& files, const ExperimentConfig& cfg) {
  std::vector<data::TokenManifest> trained;
  if (cfg.data.source == DataSource::kTokens && !cfg.data.train_path.empty()) {
    try {
      trained = data::manifests_beside(data::expand_data_paths(cfg.data.train_path, "data.train_path"));
    } catch (const Error&) {
      // The training files are not here (another machine or folder): nothing to compare with.
    }
  }
  for (const data::TokenManifest& m : data::manifests_beside(files)) {
    FP8T_INPUT_CHECK(m.vocab_size <= cfg.model.vocab_size, "tokenizer/vocabulary mismatch: ", m.path.string(),
                     " says the --data files hold tokens of ", m.tokenizer, " (", m.vocab_size,
                     " ids), but the model has model.vocab_size ", cfg.model.vocab_size,
                     ": evaluate it on token files made with its own tokenizer");
    for (const data::TokenManifest& t : trained) {
      FP8T_INPUT_CHECK(t.vocab_size == m.vocab_size && t.separator_id == m.separator_id,
                       "tokenizer mismatch: the run trained on tokens of ", t.tokenizer, " (", t.vocab_size,
                       " ids; ", t.path.string(), ") but the --data files hold tokens of ", m.tokenizer, " (",
                       m.vocab_size, " ids; ", m.path.string(), ")");
    }
  }
}

DataSource data_source(const EvalRequest& r, const ExperimentConfig& cfg) {
  if (r.source.empty()) return cfg.data.source == DataSource::kText ? DataSource::kText : DataSource::kTokens;
  FP8T_INPUT_CHECK(r.source == "text" || r.source == "tokens", "--source: expected text or tokens, got '", r.source,
                   "'");
  return r.source == "text" ? DataSource::kText : DataSource::kTokens;
}

}  // namespace

WeightsSource resolve_weights(const EvalRequest& request) {
  FP8T_INPUT_CHECK(request.run_dir.empty() != request.weights.empty(),
                   "eval: name the weights with one of --run DIR (a run folder) or --weights FILE (safetensors)");
  FP8T_INPUT_CHECK(request.run_dir.empty() || request.config.empty(),
                   "--config is for --weights; a run folder's config is its config.yaml (change keys with --set)");
  FP8T_INPUT_CHECK(!request.step || !request.run_dir.empty(), "--step picks a checkpoint of a run folder (--run)");
  return request.run_dir.empty() ? safetensors_source(request) : run_folder_source(request);
}

config::LoadedConfig load_eval_config(const WeightsSource& source, const std::vector<config::Override>& overrides) {
  if (!source.hf_config) return config::load(source.config.string(), overrides);
  std::ifstream in(source.config);
  FP8T_INPUT_CHECK(in.good(), "cannot read ", source.config.string());
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  FP8T_INPUT_CHECK(!json.is_discarded(), source.config.string(), " is not valid JSON");
  ExperimentConfig base;
  base.model = model::hf_model_section(json, source.config.string());
  return config::load_from_string(config::to_yaml(base), source.config.string(), overrides);
}

data::Dataset open_eval_data(const EvalRequest& request, const WeightsSource& source, const ExperimentConfig& cfg) {
  if (request.data.empty()) {
    FP8T_INPUT_CHECK(!source.hf_config, "--weights with ", source.config.string(),
                     ": a transformers config names no data; give the validation files with --data");
    // data.val_path alone when set (the training files, perhaps large, are not read); the
    // validation tail of data.train_path, or the synthetic stream, as the trainer opens them.
    if (cfg.data.source != DataSource::kSynthetic && !cfg.data.val_path.empty()) {
      return data::Dataset::open_validation(cfg.data.source, cfg.data.val_path, "data.val_path", cfg.model);
    }
    return data::Dataset::open(cfg.data, cfg.model, cfg.run.seed);
  }
  const DataSource kind = data_source(request, cfg);
  if (kind == DataSource::kTokens) check_manifests(data::expand_data_paths(request.data, "--data"), cfg);
  return data::Dataset::open_validation(kind, request.data, "--data", cfg.model);
}

std::optional<int64_t> safetensors_step(const fs::path& file) {
  const std::map<std::string, std::string> meta = model::read_safetensors_metadata(file);
  const auto it = meta.find("fp8train_step");
  if (it == meta.end()) return std::nullopt;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace fp8t::train
