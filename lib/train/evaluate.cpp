#include "lib/train/evaluate.h"

#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::info, spdlog::warn
#include <torch/torch.h>    // torch::NoGradGuard

#include <algorithm>     // std::max, std::min
#include <cmath>         // std::exp
#include <filesystem>    // std::filesystem
#include <map>           // std::map
#include <system_error>  // std::error_code

#include "lib/config/fields.h"          // config::to_string
#include "lib/data/dataset.h"           // data::Dataset
#include "lib/config/fp8_recipe.h"  // fp8::to_string(RecipeKind)
#include "lib/fp8/recipes/scaling.h"    // fp8::Scaling
#include "lib/model/model.h"            // model::Model::unique_named_parameters
#include "lib/model/safetensors.h"      // model::NamedTensors
#include "lib/checkpoint/checkpoint.h"  // Checkpoint, load_checkpoint
#include "lib/step/session.h"           // Session
#include "lib/train/eval_inputs.h"      // WeightsSource, resolve_weights, load_eval_config, open_eval_data
#include "lib/train/train_checkpoint.h"  // checkpoint_model_tensors, checkpoint_fp8_state
#include "lib/train/trainer.h"          // resolve_device
#include "lib/util/error.h"             // FP8T_INPUT_CHECK
#include "lib/util/timer.h"             // Stopwatch

namespace fs = std::filesystem;

namespace fp8t::train {

namespace {

// The checkpoint's FP32 master weights into the session's model, by name and shape.
void copy_weights(step::Session& session, const model::NamedTensors& saved, const fs::path& file) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : session.model().unique_named_parameters()) {
    const auto it = by_name.find(name);
    FP8T_INPUT_CHECK(it != by_name.end(), "the checkpoint ", file.string(), " has no parameter '", name,
                     "': it was written for another model config (a --set model.* the run did not use?)");
    FP8T_INPUT_CHECK(it->second.sizes() == p.sizes(), "the checkpoint ", file.string(), " holds parameter '", name,
                     "' of shape ", it->second.sizes(), " but the model has ", p.sizes(),
                     " (a --set model.* the run did not use?)");
    at::Tensor target = p;
    target.copy_(it->second);
    by_name.erase(it);
  }
  FP8T_INPUT_CHECK(by_name.empty(), "the checkpoint ", file.string(), " holds parameter '",
                   by_name.empty() ? std::string() : by_name.begin()->first,
                   "' that the model does not have: it was written for another model config");
}

// The checkpoint's FP8 scaling state, when it trained in FP8 under the recipe evaluated now
// (delayed scaling's scales come from its amax history; the other recipes keep none).
void load_fp8_state(step::Session& session, const checkpoint::Checkpoint& ck, const fs::path& file) {
  fp8::Scaling* scaling = session.scaling();
  if (scaling == nullptr) return;
  const std::string trained = ck.meta.value("precision", std::string());
  const std::string recipe = ck.meta.value("fp8_recipe", std::string(trained == "fp8" ? "delayed" : ""));
  const std::string now = fp8::to_string(scaling->kind());
  if (trained == "fp8" && recipe == now) {
    torch::NoGradGuard no_grad;
    scaling->load_state_dict(checkpoint_fp8_state(ck));
    return;
  }
  if (scaling->traits().calibrated_state) {
    spdlog::warn("{} holds no {}-scaling state (it trained in {}{}): the FP8 scales are the recipe's initial "
                 "ones, not calibrated to these weights; --fp8-recipe current derives each scale from its tensor",
                 file.string(), now, trained.empty() ? "an unknown precision" : trained,
                 recipe.empty() ? "" : " with fp8.recipe " + recipe);
  }
}

// Loads a run folder's checkpoint into the session. Returns its step; `world_size` gets the
// ranks it trained on.
int64_t load_checkpoint_weights(step::Session& session, const WeightsSource& source, int64_t& world_size) {
  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(source.file);
  const int64_t step = ck.meta.value("step", int64_t{-1});
  if (source.expected_step) {
    FP8T_INPUT_CHECK(step == *source.expected_step, "--step ", *source.expected_step, ": the run folder ",
                     source.run.string(), " has no checkpoint of step ", *source.expected_step, "; it keeps ",
                     source.kept, " and checkpoint.pt holds step ", step);
  }
  const model::NamedTensors params = checkpoint_model_tensors(ck, source.file.parent_path());
  FP8T_INPUT_CHECK(!params.empty(), "the checkpoint ", source.file.string(), " holds no model parameters");
  copy_weights(session, params, source.file);
  load_fp8_state(session, ck, source.file);
  world_size = std::max<int64_t>(1, ck.meta.value("world_size", int64_t{1}));
  return step;
}

// How many windows per batch and how many batches (the last one may hold fewer).
struct BatchPlan {
  int64_t batch_size = 0;
  int64_t full_batches = 0;
  int64_t last_rows = 0;  // --batches all: the windows after the full batches (a smaller batch)
};

BatchPlan plan_batches(const EvalRequest& r, const ExperimentConfig& cfg, const data::Dataset& data,
                       int64_t world_size, const std::string& config_name) {
  BatchPlan plan;
  plan.batch_size = r.batch_size > 0 ? r.batch_size : cfg.train.micro_batch_size * world_size;
  if (r.all) {
    const int64_t windows = data.val_windows();
    FP8T_INPUT_CHECK(windows > 0, "--batches all needs validation files, but the data is synthetic (an endless "
                     "stream): give --batches N, or token files with --data");
    plan.batch_size = std::min(plan.batch_size, windows);
    plan.full_batches = windows / plan.batch_size;
    plan.last_rows = windows % plan.batch_size;
    return plan;
  }
  plan.full_batches = r.batches.value_or(cfg.train.eval_batches);
  FP8T_INPUT_CHECK(plan.full_batches >= 1, r.batches ? "--batches" : "train.eval_batches (" + config_name + ")",
                   " is ", plan.full_batches, ": give --batches N (N >= 1) or --batches all");
  return plan;
}

// The mean loss of the plan's batches: the trainer's arithmetic (sum of batch means / N) for
// full batches; with a smaller last batch, the mean over every target token.
double mean_loss(step::Session& session, const data::Dataset& data, const BatchPlan& plan) {
  const int64_t b = plan.batch_size;
  const double full = session.eval_loss_sum([&](int64_t i) { return data.val_batch(i, b); }, plan.full_batches)
                          .item<double>();
  if (plan.last_rows == 0) return full / static_cast<double>(plan.full_batches);
  const int64_t rows = plan.last_rows;
  const auto last = [&](int64_t) {
    const data::Batch batch = data.val_batch(plan.full_batches, b);  // windows full_batches * b ..., then wraps
    return data::Batch{batch.inputs.narrow(0, 0, rows).contiguous(), batch.targets.narrow(0, 0, rows).contiguous()};
  };
  const double partial = session.eval_loss_sum(last, 1).item<double>();
  return (full * static_cast<double>(b) + partial * static_cast<double>(rows)) /
         static_cast<double>(plan.full_batches * b + rows);
}

}  // namespace

nlohmann::json EvalResult::to_json() const {
  nlohmann::json j = {{"loss", loss},         {"perplexity", perplexity}, {"tokens", tokens},
                      {"sequences", sequences}, {"batches", batches},      {"batch_size", batch_size},
                      {"precision", precision}, {"device", device},        {"weights", weights},
                      {"data", data},           {"seconds", seconds}};
  j["fp8_recipe"] = fp8_recipe.empty() ? nlohmann::json(nullptr) : nlohmann::json(fp8_recipe);
  j["step"] = step ? nlohmann::json(*step) : nlohmann::json(nullptr);
  return j;
}

std::string EvalResult::summary_line() const {
  return fmt::format("eval: loss {:.4f} | perplexity {:.4g} | {} tokens ({} sequences, {} batches of {}) | {}{} on {} "
                     "| {}{}",
                     loss, perplexity, tokens, sequences, batches, batch_size, precision,
                     fp8_recipe.empty() ? "" : " (" + fp8_recipe + ")", device, weights,
                     step ? fmt::format(" (step {})", *step) : "");
}

EvalResult evaluate_weights(const EvalRequest& request) {
  Stopwatch clock;
  const WeightsSource source = resolve_weights(request);
  config::LoadedConfig loaded = load_eval_config(source, request.overrides);
  ExperimentConfig& cfg = loaded.config;
  // The weights come from the checkpoint (or the file evaluated), not from where the run started.
  cfg.model.init_from = source.checkpoint ? std::string() : source.file.string();
  const c10::Device device = resolve_device(cfg.run.device, 0);
  const data::Dataset data = open_eval_data(request, source, cfg);

  step::Session session(cfg, device);  // safetensors: loaded by the model (model.init_from)
  int64_t world_size = 1;
  std::optional<int64_t> step = source.checkpoint ? std::optional<int64_t>(load_checkpoint_weights(session, source, world_size))
                                                  : safetensors_step(source.file);
  const BatchPlan plan = plan_batches(request, cfg, data, world_size, source.config.string());
  spdlog::info("eval: {}{} | data {} | {} batches of {} windows{} | precision {} on {}", source.file.string(),
               step ? fmt::format(" (step {})", *step) : "", data.describe(), plan.full_batches, plan.batch_size,
               plan.last_rows ? fmt::format(" and one of {}", plan.last_rows) : "", config::to_string(cfg.precision),
               device.str());

  EvalResult result;
  result.loss = mean_loss(session, data, plan);
  result.perplexity = std::exp(result.loss);
  result.batches = plan.full_batches + (plan.last_rows > 0 ? 1 : 0);
  result.batch_size = plan.batch_size;
  result.sequences = plan.full_batches * plan.batch_size + plan.last_rows;
  result.tokens = result.sequences * cfg.model.seq_len;
  result.precision = config::to_string(cfg.precision);
  if (const fp8::Scaling* scaling = session.scaling()) result.fp8_recipe = fp8::to_string(scaling->kind());
  result.device = device.str();
  result.weights = source.file.string();
  result.step = step;
  result.data = data.describe();
  result.seconds = clock.seconds();
  return result;
}

}  // namespace fp8t::train
