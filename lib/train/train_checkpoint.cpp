#include "lib/train/train_checkpoint.h"

#include <fmt/format.h>      // fmt::format
#include <spdlog/spdlog.h>  // spdlog::info, spdlog::warn
#include <torch/torch.h>    // torch::NoGradGuard, at::detail::getDefaultCPUGenerator

#include <map>     // std::map
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/config/fields.h"        // config::to_string
#include "lib/fp8/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/model/gpt.h"            // model::Gpt
#include "lib/train/checkpoint.h"     // Checkpoint, save_checkpoint, load_checkpoint
#include "lib/train/metrics.h"        // truncate_metrics_after
#include "lib/train/loss_scaler.h"    // LossScaler
#include "lib/train/optimizer.h"      // AdamW
#include "lib/train/step_health.h"    // StepHealth
#include "lib/util/error.h"           // FP8T_INPUT_CHECK

namespace fp8t::train {

namespace {

Checkpoint make_checkpoint(const Run& run, int64_t step, const Progress& progress) {
  Checkpoint ck;
  const Session& session = *run.session;
  for (const auto& [name, p] : session.model().unique_named_parameters()) ck.tensors["model." + name] = p.detach();
  for (const auto& [k, v] : session.optimizer().state_dict()) ck.tensors["optim." + k] = v;
  if (const auto* scaling = session.scaling()) {
    for (const auto& [k, v] : scaling->state_dict()) ck.tensors[k] = v;
  }
  if (const LossScaler* scaler = session.loss_scaler()) {  // fp16: the scale and its growth tracker
    for (const auto& [k, v] : scaler->state_dict()) ck.tensors[k] = v;
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  ck.tensors["rng.cpu"] = gen.get_state();
  ck.meta = progress.checkpoint_meta();
  ck.meta["step"] = step;
  ck.meta["data_position"] = run.data.train_position();
  ck.meta["precision"] = config::to_string(run.cfg.precision);
  ck.meta["world_size"] = run.world_size;
  return ck;
}

void restore_checkpoint(Run& run, const Checkpoint& ck) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : run.session->model().unique_named_parameters()) {
    const auto it = ck.tensors.find("model." + name);
    FP8T_INPUT_CHECK(it != ck.tensors.end(), "checkpoint has no parameter '", name,
                     "': it was written for a different model config");
    FP8T_INPUT_CHECK(it->second.sizes() == p.sizes(), "checkpoint parameter '", name, "' has shape ",
                     it->second.sizes(), " but the model has ", p.sizes());
    p.copy_(it->second);
  }
  std::map<std::string, at::Tensor> optim, fp8_state;
  for (const auto& [k, v] : ck.tensors) {
    if (k.rfind("optim.", 0) == 0) optim[k.substr(6)] = v;
    if (k.rfind("fp8.", 0) == 0) fp8_state[k] = v;
  }
  run.session->optimizer().load_state_dict(optim);
  if (auto* scaling = run.session->scaling()) scaling->load_state_dict(fp8_state);
  if (LossScaler* scaler = run.session->loss_scaler()) scaler->load_state_dict(ck.tensors);
  const auto rng = ck.tensors.find("rng.cpu");
  FP8T_INPUT_CHECK(rng != ck.tensors.end(), "checkpoint has no RNG state");
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng->second);
  run.data.set_train_position(ck.meta.at("data_position").get<int64_t>());
}

}  // namespace

Checkpointer::Checkpointer(Run& run, const RunDir& dir) : run_(run), dir_(dir), path_(dir.checkpoint_path()) {}

void Checkpointer::resume(Progress& progress) {
  // Every rank reads the checkpoint (on several nodes the run folder must be on shared storage).
  const Checkpoint ck = load_checkpoint(path_);
  const int saved_world = ck.meta.value("world_size", 1);
  FP8T_INPUT_CHECK(saved_world == run_.world_size, "the checkpoint ", path_.string(), " was written by a job of ",
                   saved_world, " rank(s); resume it with the same number (now ", run_.world_size, ")");
  restore_checkpoint(run_, ck);
  const int64_t start_step = ck.meta.at("step").get<int64_t>();
  progress.restore(ck.meta, start_step);
  run_.session->health().restore_skipped(progress.skipped_steps);
  if (run_.main_rank) truncate_metrics_after(dir_.metrics_path(), start_step);
  spdlog::info("resumed {} at step {}", path_.string(), start_step);
  const int64_t steps = run_.cfg.train.steps;
  FP8T_INPUT_CHECK(start_step < steps, "the checkpoint is at step ", start_step, " and train.steps is ", steps,
                   ": nothing to do (raise --steps to train further)");
}

bool Checkpointer::due(int64_t step) const {
  const TrainSection& t = run_.cfg.train;
  const bool by_time = t.checkpoint_every_min > 0 && since_save_.seconds() >= 60.0 * t.checkpoint_every_min;
  return (t.checkpoint_interval > 0 && step % t.checkpoint_interval == 0) || step == t.steps ||
         (by_time && run_.main_rank);
}

std::string Checkpointer::unsafe_state(const StepHealth::Counts& health) const {
  if (health.diverged_at > 0) {
    return fmt::format("the run diverged at step {} ({} non-finite steps in a row)", health.diverged_at,
                       run_.cfg.train.max_skipped_steps);
  }
  // Skipped steps never change the weights, so this only fires for weights that a finite but
  // huge update pushed out of range. One reduction over the parameters, one read.
  std::vector<at::Tensor> finite;
  for (const at::Tensor& p : run_.session->parameters()) finite.push_back(at::isfinite(p.detach()).all());
  if (!finite.empty() && !at::stack(finite).all().item<bool>()) return "a weight is not finite";
  return "";
}

void Checkpointer::save(int64_t step, const Progress& progress) {
  if (!run_.main_rank) return;
  const StepHealth::Counts health = run_.session->health().read();  // the host's read before a write
  if (const std::string why = unsafe_state(health); !why.empty()) {
    spdlog::warn("not writing the checkpoint after step {}: {}; {} keeps the last good state", step, why,
                 path_.string());
    return;
  }
  Checkpoint ck = make_checkpoint(run_, step, progress);
  ck.meta["skipped_steps"] = health.skipped;  // up to this step (progress holds the last log step's count)
  try {
    save_checkpoint(path_, ck);
  } catch (const Error& e) {
    // Disk full or an I/O error: the training itself cannot go on safely without checkpoints.
    std::error_code ec;
    FP8T_THROW(ExitCode::kTrainingFailed, e.what(),
               std::filesystem::is_regular_file(path_, ec)
                   ? " (the previous checkpoint " + path_.string() + " is intact; free space and continue with --resume)"
                   : std::string(" (no checkpoint had been written yet)"));
  }
  since_save_.reset();
}

}  // namespace fp8t::train
