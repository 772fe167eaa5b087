#include "lib/train/train_checkpoint.h"

#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::info, spdlog::warn
#include <torch/torch.h>    // torch::NoGradGuard, at::detail::getDefaultCPUGenerator

#include <fstream>  // std::ifstream
#include <map>      // std::map
#include <set>      // std::set
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/config/fields.h"                // config::to_string
#include "lib/fp8/recipes/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/model/gpt.h"                    // model::Gpt
#include "lib/run/checkpoint.h"               // Checkpoint, save_checkpoint, load_checkpoint
#include "lib/run/checkpoint_files.h"         // describe_kept, kept_checkpoints
#include "lib/run/metrics.h"                  // truncate_metrics_after
#include "lib/step/loss_scaler.h"             // LossScaler
#include "lib/dist/communicator.h"            // dist::Communicator
#include "lib/optim/optimizer.h"              // AdamW
#include "lib/optim/optimizer_checkpoint.h"   // OptimizerStateLoader, shard files
#include "lib/step/step_health.h"             // StepHealth
#include "lib/util/error.h"                   // FP8T_INPUT_CHECK

namespace fp8t::train {

namespace {

Checkpoint make_checkpoint(const Run& run, int64_t step, const Progress& progress) {
  Checkpoint ck;
  const Session& session = *run.session;
  for (const auto& [name, p] : session.model().unique_named_parameters()) ck.tensors["model." + name] = p.detach();
  // ZeRO-1: the optimizer state is in the ranks' shard files (save_shards), this file is their manifest.
  if (!session.optimizer().sharded()) {
    for (const auto& [k, v] : session.optimizer().state_dict()) ck.tensors["optim." + k] = v;
  }
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
  if (const auto* scaling = session.scaling()) ck.meta["fp8_recipe"] = fp8::to_string(scaling->kind());
  ck.meta["world_size"] = run.world_size;
  return ck;
}

// The optimizer state from checkpoint.pt (optim.* tensors, whole parameters) or from the ZeRO-1
// shard files it lists, resharded onto this job's layout (any world size, DDP or ZeRO-1).
void restore_optimizer(Run& run, const Checkpoint& ck, const std::filesystem::path& path) {
  std::set<std::string> names;
  for (const auto& [name, p] : run.session->model().unique_named_parameters()) names.insert(name);
  OptimizerStateLoader loader(run.session->optimizer(), std::move(names));
  if (ck.meta.contains("zero")) {
    load_optimizer_shards(path.parent_path(), ck.meta["zero"], loader);
  } else {
    loader.add(ck.tensors, {}, path.string());
  }
  loader.finish();
}

// The FP8 state in the checkpoint belongs to one recipe (fp8_recipe; older checkpoints: delayed).
void check_fp8_recipe(const Run& run, const Checkpoint& ck, const std::filesystem::path& path) {
  const fp8::Scaling* scaling = run.session->scaling();
  if (scaling == nullptr) return;
  const std::string saved = ck.meta.value("fp8_recipe", std::string(fp8::to_string(fp8::RecipeKind::kDelayed)));
  const std::string now = fp8::to_string(scaling->kind());
  FP8T_INPUT_CHECK(saved == now, "the checkpoint ", path.string(), " was written under fp8.recipe ", saved,
                   " and this run uses fp8.recipe ", now, ": resume with --fp8-recipe ", saved,
                   ", or start a new run (--run-name) to train under ", now);
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
  std::map<std::string, at::Tensor> fp8_state;
  for (const auto& [k, v] : ck.tensors) {
    if (k.rfind("fp8.", 0) == 0) fp8_state[k] = v;
  }
  if (auto* scaling = run.session->scaling()) scaling->load_state_dict(fp8_state);
  if (LossScaler* scaler = run.session->loss_scaler()) scaler->load_state_dict(ck.tensors);
  const auto rng = ck.tensors.find("rng.cpu");
  FP8T_INPUT_CHECK(rng != ck.tensors.end(), "checkpoint has no RNG state");
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng->second);
  run.data.set_train_position(ck.meta.at("data_position").get<int64_t>());
}

// summary.json as the run would write it after `step` steps (kept in the final checkpoint, so a
// resume can write it when writing it failed at the end).
nlohmann::json summary_at(const Run& run, const Progress& progress, int64_t step) {
  Progress at = progress;
  at.step = step;
  return at.summary(run);
}

// Whether summary.json records a completed run.
bool summary_completed(const RunDir& dir) {
  std::ifstream in(dir.summary_path());
  if (!in) return false;
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return summary.is_object() && summary.value("status", "") == "completed";
}

void warn_if_metrics_missing(const RunDir& dir, int64_t step) {
  std::error_code ec;
  if (step == 0 || std::filesystem::exists(dir.metrics_path(), ec)) return;
  spdlog::warn("{} is missing: the rows of steps 1 to {} are lost; the file starts again with step {}",
               dir.metrics_path().string(), step, step + 1);
}

}  // namespace

Checkpointer::Checkpointer(Run& run, const RunDir& dir)
    : run_(run), dir_(dir), path_(dir.checkpoint_path()),
      history_(dir.path(), run.cfg.train.keep_checkpoints, run.main_rank) {}

bool Checkpointer::resume(Progress& progress) {
  // Every rank reads the checkpoint (on several nodes the run folder must be on shared storage).
  const ResumeSource source = history_.resume_source(run_.options.resume_from);
  const Checkpoint ck = load_checkpoint(source.file);
  const int64_t start_step = ck.meta.at("step").get<int64_t>();
  FP8T_INPUT_CHECK(!source.expected_step || *source.expected_step == start_step, "--resume-from ",
                   run_.options.resume_from, ": the run folder ", dir_.path().string(), " has no checkpoint of step ",
                   *source.expected_step, "; ", path_.filename().string(), " holds step ", start_step,
                   ", and the folder keeps ", describe_kept(kept_checkpoints(dir_.path())));
  const int saved_world = ck.meta.value("world_size", 1);
  const bool saved_zero = ck.meta.contains("zero");
  if (saved_world != run_.world_size || saved_zero != run_.session->optimizer().sharded()) {
    // The optimizer state is resharded; the data position counts global batches, so the rows
    // continue where they stopped when the global batch (ranks x micro_batch_size) is kept.
    spdlog::info("resharding the checkpoint of {} rank(s){} onto {} rank(s){}", saved_world,
                 saved_zero ? " (ZeRO-1)" : "", run_.world_size, run_.session->optimizer().sharded() ? " (ZeRO-1)" : "");
  }
  check_fp8_recipe(run_, ck, source.file);
  restore_checkpoint(run_, ck);
  restore_optimizer(run_, ck, source.file);
  history_.resumed(source, start_step);
  progress.restore(ck.meta, start_step);
  run_.session->health().restore_skipped(progress.skipped_steps);
  if (run_.main_rank) warn_if_metrics_missing(dir_, start_step);
  if (run_.main_rank) {
    try {
      truncate_metrics_after(dir_.metrics_path(), start_step);
    } catch (const Error& e) {  // a write that fails (disk full): exit 3, as every run-folder write
      if (e.code() != ExitCode::kFailure) throw;
      FP8T_THROW(ExitCode::kTrainingFailed, e.what());
    }
  }
  spdlog::info("resumed {} at step {}", source.file.string(), start_step);
  const int64_t steps = run_.cfg.train.steps;
  if (start_step == steps && ck.meta.contains("final_summary") && !summary_completed(dir_)) {
    final_summary_ = ck.meta["final_summary"];  // the run trained to the end; its summary was never written
    return false;
  }
  FP8T_INPUT_CHECK(start_step < steps, "the checkpoint is at step ", start_step, " and train.steps is ", steps,
                   ": nothing to do (raise --steps to train further)");
  return true;
}

bool Checkpointer::due(int64_t step) const {
  const TrainSection& t = run_.cfg.train;
  bool by_time = t.checkpoint_every_min > 0 && since_save_.seconds() >= 60.0 * t.checkpoint_every_min;
  if (run_.comm && run_.session->optimizer().sharded()) {
    // ZeRO-1: all ranks write, so they must agree: rank 0's clock decides, read at log
    // steps only (one small collective where the host syncs anyway).
    if (t.checkpoint_every_min <= 0 || step % t.log_interval != 0) {
      by_time = false;
    } else {
      const at::Tensor flag = at::full({1}, by_time && run_.main_rank ? 1.0f : 0.0f,
                                       at::TensorOptions().device(run_.device));
      run_.comm->all_reduce(flag, dist::ReduceOp::kMax);
      by_time = flag.item<float>() > 0;
    }
    return (t.checkpoint_interval > 0 && step % t.checkpoint_interval == 0) || step == t.steps || by_time;
  }
  return (t.checkpoint_interval > 0 && step % t.checkpoint_interval == 0) || step == t.steps ||
         (by_time && run_.main_rank);
}

nlohmann::json Checkpointer::save_shards(int64_t step) {
  dist::Communicator& comm = *run_.comm;
  const int rank = comm.rank(), world = comm.world_size();
  const std::string file = shard_file_name(rank, world, step);
  // Each rank's outcome and CRC32C go to every rank in one SUM all-reduce: [failed..., crc...].
  at::Tensor report = at::zeros({2 * world}, at::TensorOptions().dtype(at::kLong).device(run_.device));
  std::string error;
  try {
    const uint32_t crc = save_checkpoint(path_.parent_path() / file,
                                         make_optimizer_shard(run_.session->optimizer(), rank, world, step));
    report[world + rank] = static_cast<int64_t>(crc);
  } catch (const Error& e) {
    error = e.what();
    report[rank] = 1;
  }
  comm.all_reduce(report, dist::ReduceOp::kSum);
  const at::Tensor host = report.cpu();
  for (int r = 0; r < world; ++r) {
    if (host[r].item<int64_t>() == 0) continue;
    FP8T_THROW(ExitCode::kTrainingFailed, !error.empty() ? error : fmt::format("rank {} could not write its "
               "optimizer shard", r), " (the previous checkpoint ", path_.string(), " and its shards are intact; "
               "free space and continue with --resume)");
  }
  nlohmann::json shards = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    shards.push_back({{"file", shard_file_name(r, world, step)}, {"crc32c", host[world + r].item<int64_t>()}});
  }
  return {{"world_size", world}, {"step", step}, {"shards", shards}};
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

void Checkpointer::save(int64_t step, const Progress& progress, bool scheduled) {
  const bool sharded = run_.session->optimizer().sharded() && run_.comm;
  // ZeRO-1: every rank decides the same (the counters and the weights are the same everywhere).
  const StepHealth::Counts health = run_.session->health().read();  // the host's read before a write
  if (scheduled && step < run_.cfg.train.steps && health.consecutive > 0) {
    // Skipped steps left the weights of the step before the streak: a checkpoint now would hold
    // them again and push an older checkpoint out of train.keep_checkpoints.
    if (run_.main_rank) {
      spdlog::info("not writing the checkpoint after step {}: the last {} step(s) were skipped (non-finite), so it "
                   "would hold the weights of step {} again", step, health.consecutive, health.streak_start - 1);
    }
    return;
  }
  if (const std::string why = unsafe_state(health); !why.empty()) {
    if (run_.main_rank) {
      spdlog::warn("not writing the checkpoint after step {}: {}; {} keeps the last good state", step, why,
                   path_.string());
    }
    return;
  }
  Checkpoint ck;
  if (run_.main_rank) {
    ck = make_checkpoint(run_, step, progress);
    ck.meta["skipped_steps"] = health.skipped;  // up to this step (progress holds the last log step's count)
    if (step == run_.cfg.train.steps) ck.meta["final_summary"] = summary_at(run_, progress, step);
  }
  if (sharded) ck.meta["zero"] = save_shards(step);  // every rank writes its shard first
  try {
    history_.before_save(step);  // every rank keeps the bookkeeping; rank 0 the files
    if (run_.main_rank) save_checkpoint(path_, ck);
    history_.after_save(step);
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
