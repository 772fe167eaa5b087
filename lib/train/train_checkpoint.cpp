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
#include "lib/config/parallel_layout.h"       // ZeroStage, zero_level, zero_stage_of_level
#include "lib/fp8/recipes/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/model/model.h"                  // model::Model::unique_named_parameters
#include "lib/checkpoint/checkpoint.h"        // Checkpoint, save_checkpoint, load_checkpoint
#include "lib/run/checkpoint_files.h"         // describe_kept, kept_checkpoints
#include "lib/train/job_fingerprint.h"        // data_record_changes
#include "lib/run/metrics.h"                  // truncate_metrics_after
#include "lib/step/loss_scaler.h"             // LossScaler
#include "lib/dist/communicator.h"            // dist::Communicator
#include "lib/dist/fully_sharded.h"           // dist::FullyShardedModel
#include "lib/optim/optimizer.h"              // AdamW
#include "lib/checkpoint/optimizer_state.h"   // OptimizerStateLoader, ModelStateLoader, shard files
#include "lib/step/step_health.h"             // StepHealth
#include "lib/util/error.h"                   // FP8T_INPUT_CHECK

namespace fp8t::train {

namespace {

// The parts of the model's parameters this rank holds, as flat tensors: whole parameters, or
// ZeRO-3's segments (their FP32 masters in the rank's master shards).
std::vector<checkpoint::ModelStateLoader::Target> owned_parameter_parts(const step::Session& s) {
  std::vector<checkpoint::ModelStateLoader::Target> out;
  if (const dist::FullyShardedModel* sharded = s.fully_sharded()) {
    for (const auto& seg : sharded->segments()) out.push_back({seg.name, optim::ParamRange{seg.begin, seg.length}, seg.master});
  } else {
    for (const auto& [name, p] : s.model().unique_named_parameters()) {
      out.push_back({name, optim::ParamRange{0, p.numel()}, p.detach().view(-1)});
    }
  }
  return out;
}

std::set<std::string> parameter_names(const step::Session& s) {
  std::set<std::string> names;
  for (const auto& [name, p] : s.model().unique_named_parameters()) names.insert(name);
  return names;
}

// ZeRO-3's manifest entry "model": the shape of every parameter (the shard files hold its parts).
nlohmann::json parameter_shapes(const step::Session& s) {
  nlohmann::json shapes = nlohmann::json::object();
  for (const auto& [name, p] : s.model().unique_named_parameters()) shapes[name] = p.sizes().vec();
  return shapes;
}

checkpoint::Checkpoint make_checkpoint(const TrainingJob& run, int64_t step, const Progress& progress) {
  checkpoint::Checkpoint ck;
  const step::Session& session = *run.session;
  // ZeRO-3: no rank holds the whole model; the ranks' shard files hold its parts (save_shards).
  if (session.fully_sharded() == nullptr) {
    for (const auto& [name, p] : session.model().unique_named_parameters()) ck.tensors["model." + name] = p.detach();
  }
  // ZeRO-1: the optimizer state is in the ranks' shard files (save_shards), this file is their manifest.
  if (!session.optimizer().sharded()) {
    for (const auto& [k, v] : session.optimizer().state_dict()) ck.tensors["optim." + k] = v;
  }
  if (const auto* scaling = session.scaling()) {
    for (const auto& [k, v] : scaling->state_dict()) ck.tensors[k] = v;
  }
  // The model's state outside its parameters (a router's selection bias): identical on every rank.
  for (const auto& [name, t] : run.session->model().model_state()) ck.tensors["model_state." + name] = t.detach();
  if (const step::LossScaler* scaler = session.loss_scaler()) {  // fp16: the scale and its growth tracker
    for (const auto& [k, v] : scaler->state_dict()) ck.tensors[k] = v;
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  ck.tensors["rng.cpu"] = gen.get_state();
  ck.meta = progress.checkpoint_meta();
  ck.meta["step"] = step;
  ck.meta["data_position"] = run.data.train_position();
  ck.meta["data_windows"] = run.data.windows_drawn();
  ck.meta["precision"] = config::to_string(run.cfg.precision);
  if (const auto* scaling = session.scaling()) ck.meta["fp8_recipe"] = fp8::to_string(scaling->kind());
  ck.meta["world_size"] = run.layout.world_size;
  return ck;
}

// Whole parameters in checkpoint.pt ("model.<name>") must have the model's shapes; a ZeRO-3
// manifest lists the shapes of the parameters whose parts its shard files hold.
void check_parameter_shapes(const TrainingJob& run, const checkpoint::Checkpoint& ck, bool in_shards) {
  const nlohmann::json* shapes = in_shards ? &ck.meta["zero"]["model"] : nullptr;
  for (const auto& [name, p] : run.session->model().unique_named_parameters()) {
    const auto it = ck.tensors.find("model." + name);
    const bool found = in_shards ? shapes->contains(name) : it != ck.tensors.end();
    FP8T_INPUT_CHECK(found, "checkpoint has no parameter '", name, "': it was written for a different model config");
    const std::vector<int64_t> saved = in_shards ? (*shapes)[name].get<std::vector<int64_t>>() : it->second.sizes().vec();
    FP8T_INPUT_CHECK(at::IntArrayRef(saved) == p.sizes(), "checkpoint parameter '", name, "' has shape ",
                     at::IntArrayRef(saved), " but the model has ", p.sizes());
  }
}

// The weights and the optimizer state from checkpoint.pt (model.* and optim.* tensors, whole
// parameters) or from the shard files it lists (ZeRO-1: the optimizer state; ZeRO-3: both),
// resharded onto this job's layout (any world size, zero level and shard group size).
void restore_weights_and_optimizer(TrainingJob& run, const checkpoint::Checkpoint& ck,
                                   const std::filesystem::path& path) {
  const bool shards = ck.meta.contains("zero");
  const bool model_in_shards = shards && ck.meta["zero"].contains("model");
  check_parameter_shapes(run, ck, model_in_shards);
  const std::set<std::string> names = parameter_names(*run.session);
  checkpoint::ModelStateLoader model(owned_parameter_parts(*run.session), names);
  checkpoint::OptimizerStateLoader optimizer(run.session->optimizer(), names);
  if (!model_in_shards) model.add(ck.tensors, {}, path.string());
  if (shards) {
    checkpoint::for_each_shard(
        path.parent_path(), ck.meta["zero"],
        [&](const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, optim::ParamRange>& ranges,
            const std::string& file) {
          if (model_in_shards) model.add(tensors, ranges, file);
          optimizer.add(tensors, ranges, file);
        });
  } else {
    optimizer.add(ck.tensors, {}, path.string());
  }
  model.finish();
  optimizer.finish();
  if (dist::FullyShardedModel* sharded = run.session->fully_sharded()) sharded->parameters_updated();
}

// The FP8 state in the checkpoint belongs to one recipe (fp8_recipe; older checkpoints: delayed).
void check_fp8_recipe(const TrainingJob& run, const checkpoint::Checkpoint& ck, const std::filesystem::path& path) {
  const fp8::Scaling* scaling = run.session->scaling();
  if (scaling == nullptr) return;
  const std::string saved = ck.meta.value("fp8_recipe", std::string("delayed"));  // written before the key: delayed
  const std::string now = fp8::to_string(scaling->kind());
  FP8T_INPUT_CHECK(saved == now, "the checkpoint ", path.string(), " was written under fp8.recipe ", saved,
                   " and this run uses fp8.recipe ", now, ": resume with --fp8-recipe ", saved,
                   ", or start a new run (--run-name) to train under ", now);
}

// The data files against those the checkpoint was trained on (its meta "data_files"): files
// that differ are exit 2 naming each, unless run.accept_data_change says to go on (a warning
// then lists them). A checkpoint written before the record existed is resumed with a note.
void check_data_files(const TrainingJob& run, const checkpoint::Checkpoint& ck, const nlohmann::json& now, const std::filesystem::path& path,
                      int64_t step) {
  if (!ck.meta.contains("data_files")) {
    if (run.layout.is_rank0() && !now.empty()) {
      spdlog::info("{} records no data files (written by an older fp8train): the data files are not compared with "
                   "those step {} was trained on", path.string(), step);
    }
    return;
  }
  const std::vector<std::string> changes = data_record_changes(ck.meta["data_files"], now);
  if (changes.empty()) return;
  std::string list;
  for (const std::string& change : changes) list += (list.empty() ? "" : "; ") + change;
  FP8T_INPUT_CHECK(run.cfg.run.accept_data_change, "cannot resume ", path.string(), " (step ", step,
                   "): the data files differ from those it was trained on: ", list,
                   ". Resuming would continue the data order over other tokens. Restore the files, or continue on the "
                   "changed data on purpose with --accept-data-change (run.accept_data_change: true; the checkpoints "
                   "written from then on record the new files)");
  if (run.layout.is_rank0()) {
    spdlog::warn("resuming {} (step {}) on data files that differ from those it was trained on "
                 "(run.accept_data_change): {}", path.string(), step, list);
  }
}

// The shard files a ZeRO manifest (checkpoint.pt's meta "zero") lists that are not in `folder`.
std::vector<std::string> missing_shard_files(const nlohmann::json& meta, const std::filesystem::path& folder) {
  std::vector<std::string> missing;
  if (!meta.contains("zero") || !meta["zero"].contains("shards") || !meta["zero"]["shards"].is_array()) return missing;
  for (const nlohmann::json& shard : meta["zero"]["shards"]) {
    if (!shard.contains("file") || !shard["file"].is_string()) continue;
    std::error_code ec;
    const std::string file = shard["file"].get<std::string>();
    if (!std::filesystem::is_regular_file(folder / file, ec)) missing.push_back(file);
  }
  return missing;
}

// The kept checkpoints of steps before `step` that load (CRC32C checked) and whose shard files
// are all there: the ones a --resume-from can continue.
std::map<int64_t, std::filesystem::path> complete_checkpoints_before(const std::filesystem::path& folder, int64_t step) {
  std::map<int64_t, std::filesystem::path> complete;
  for (const auto& [kept_step, file] : run::kept_checkpoints(folder)) {
    if (kept_step >= step) continue;
    try {
      if (missing_shard_files(checkpoint::load_checkpoint(file).meta, folder).empty()) complete[kept_step] = file;
    } catch (const Error&) {  // corrupt or unreadable: not a way back
    }
  }
  return complete;
}

// A ZeRO checkpoint whose shard files are not all there is exit 2 naming them, the complete
// older checkpoints the folder keeps and the --resume-from that continues the newest of them.
void check_shard_files(const checkpoint::Checkpoint& ck, const std::filesystem::path& path, int64_t step) {
  const std::filesystem::path folder = path.parent_path();
  const std::vector<std::string> missing = missing_shard_files(ck.meta, folder);
  if (missing.empty()) return;
  std::string names;
  for (const std::string& file : missing) names += (names.empty() ? "" : ", ") + file;
  const auto complete = complete_checkpoints_before(folder, step);
  FP8T_THROW(ExitCode::kBadInput, "cannot resume ", path.string(), " (step ", step, "): ", missing.size(), " of its ",
             ck.meta["zero"]["shards"].size(), " ZeRO shard files ", missing.size() == 1 ? "is" : "are",
             " missing from ", folder.string(), " (", names, ")",
             complete.empty() ? std::string("; the folder keeps no complete earlier checkpoint: restore the files, or "
                                            "start the run again (--overwrite)")
                              : "; the complete earlier checkpoints the folder keeps: " + run::describe_kept(complete) +
                                    ": continue from the newest with --resume-from " +
                                    std::to_string(complete.rbegin()->first));
}

// The model's state outside its parameters ("model_state.<name>", Model::model_state).
void restore_model_state(TrainingJob& run, const checkpoint::Checkpoint& ck) {
  for (auto& [name, t] : run.session->model().model_state()) {
    const auto it = ck.tensors.find("model_state." + name);
    FP8T_INPUT_CHECK(it != ck.tensors.end(), "checkpoint has no model state '", name,
                     "': it was written for a different model config");
    FP8T_INPUT_CHECK(it->second.sizes() == t.sizes(), "checkpoint model state '", name, "' has shape ",
                     it->second.sizes(), " but the model has ", t.sizes());
    t.copy_(it->second);
  }
}

// The FP8, loss-scaler, RNG and data state (the weights and the optimizer: above).
void restore_checkpoint(TrainingJob& run, const checkpoint::Checkpoint& ck) {
  torch::NoGradGuard no_grad;
  restore_model_state(run, ck);
  if (auto* scaling = run.session->scaling()) scaling->load_state_dict(checkpoint_fp8_state(ck));
  if (step::LossScaler* scaler = run.session->loss_scaler()) scaler->load_state_dict(ck.tensors);
  const auto rng = ck.tensors.find("rng.cpu");
  FP8T_INPUT_CHECK(rng != ck.tensors.end(), "checkpoint has no RNG state");
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng->second);
  const int64_t position = ck.meta.at("data_position").get<int64_t>();
  run.data.set_train_position(position);
  // Checkpoints before data_windows drew micro_batch_size rows per rank and call.
  run.data.set_windows_drawn(
      ck.meta.value("data_windows", position * run.cfg.train.micro_batch_size * run.layout.world_size));
}

// summary.json as the run would write it after `step` steps (kept in the final checkpoint, so a
// resume can write it when writing it failed at the end).
nlohmann::json summary_at(const TrainingJob& run, const Progress& progress, int64_t step) {
  Progress at = progress;
  at.step = step;
  return at.summary(run);
}

// Whether summary.json records a completed run.
bool summary_completed(const run::RunDir& dir) {
  std::ifstream in(dir.summary_path());
  if (!in) return false;
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return summary.is_object() && summary.value("status", "") == "completed";
}

void warn_if_metrics_missing(const run::RunDir& dir, int64_t step) {
  std::error_code ec;
  if (step == 0 || std::filesystem::exists(dir.metrics_path(), ec)) return;
  spdlog::warn("{} is missing: the rows of steps 1 to {} are lost; the file starts again with step {}",
               dir.metrics_path().string(), step, step + 1);
}

// The stage a checkpoint's shard manifest was written under: "level" 3 is ZeRO-3's; manifests
// without it (or with another level) are ZeRO-1's.
ZeroStage saved_zero_stage(const nlohmann::json& manifest) {
  return zero_stage_of_level(manifest.value("level", int64_t{1})).value_or(ZeroStage::kOptimizer);
}

}  // namespace

std::map<std::string, at::Tensor> checkpoint_fp8_state(const checkpoint::Checkpoint& ck) {
  std::map<std::string, at::Tensor> state;
  for (const auto& [k, v] : ck.tensors) {
    if (k.rfind("fp8.", 0) == 0) state[k] = v;
  }
  return state;
}

std::vector<std::pair<std::string, at::Tensor>> checkpoint_model_tensors(const checkpoint::Checkpoint& ck,
                                                                        const std::filesystem::path& folder) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!ck.meta.contains("zero") || !ck.meta["zero"].contains("model")) {
    for (const auto& [k, v] : ck.tensors) {
      if (k.rfind("model.", 0) == 0) out.emplace_back(k.substr(6), v);
    }
    return out;
  }
  // ZeRO-3: every parameter whole, from the parts in the shard files.
  std::vector<checkpoint::ModelStateLoader::Target> targets;
  std::set<std::string> names;
  for (const auto& [name, shape] : ck.meta["zero"]["model"].items()) {
    const at::Tensor t = at::zeros(shape.get<std::vector<int64_t>>(), at::kFloat);
    out.emplace_back(name, t);
    targets.push_back({name, optim::ParamRange{0, t.numel()}, t.view(-1)});
    names.insert(name);
  }
  checkpoint::ModelStateLoader loader(std::move(targets), std::move(names));
  checkpoint::for_each_shard(
      folder, ck.meta["zero"],
      [&](const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, optim::ParamRange>& ranges,
          const std::string& file) { loader.add(tensors, ranges, file); });
  loader.finish();
  return out;
}

Checkpointer::Checkpointer(TrainingJob& run, const run::RunDir& dir)
    : run_(run), dir_(dir), path_(dir.checkpoint_path()),
      history_(dir.path(), run.cfg.train.keep_checkpoints, run.layout.is_rank0()), data_record_(data_record(run.cfg)) {}

bool Checkpointer::resume(Progress& progress) {
  // Every rank reads the checkpoint (on several nodes the run folder must be on shared storage).
  const checkpoint::ResumeSource source = history_.resume_source(run_.options.resume_from);
  checkpoint::Checkpoint ck = checkpoint::load_checkpoint(source.file);
  run_.session->cut_to_local_experts(ck.tensors);  // expert parallelism: this rank's experts of the whole ones
  const int64_t start_step = ck.meta.at("step").get<int64_t>();
  FP8T_INPUT_CHECK(!source.expected_step || *source.expected_step == start_step, "--resume-from ",
                   run_.options.resume_from, ": the run folder ", dir_.path().string(), " has no checkpoint of step ",
                   *source.expected_step, "; ", path_.filename().string(), " holds step ", start_step,
                   ", and the folder keeps ", run::describe_kept(run::kept_checkpoints(dir_.path())));
  const int saved_world = ck.meta.value("world_size", 1);
  const std::string saved = !ck.meta.contains("zero")                                 ? ""
                            : saved_zero_stage(ck.meta["zero"]) == ZeroStage::kFull ? " (ZeRO-3)"
                                                                                    : " (ZeRO-1)";
  const std::string now = run_.session->fully_sharded() ? " (ZeRO-3)" : run_.session->optimizer().sharded() ? " (ZeRO-1)" : "";
  if (saved_world != run_.layout.world_size || saved != now) {
    // The state is resharded; the data position counts global batches, so the rows continue
    // where they stopped when the global batch (ranks x micro_batch_size) is kept.
    spdlog::info("resharding the checkpoint of {} rank(s){} onto {} rank(s){}", saved_world, saved,
                 run_.layout.world_size, now);
  }
  check_data_files(run_, ck, data_record_, source.file, start_step);
  check_shard_files(ck, source.file, start_step);
  check_fp8_recipe(run_, ck, source.file);
  restore_weights_and_optimizer(run_, ck, source.file);
  restore_checkpoint(run_, ck);
  history_.resumed(source, start_step);
  progress.restore(ck.meta, start_step);
  run_.session->health().restore_skipped(progress.skipped_steps);
  if (run_.layout.is_rank0()) warn_if_metrics_missing(dir_, start_step);
  if (run_.layout.is_rank0()) {
    try {
      run::truncate_metrics_after(dir_.metrics_path(), start_step);
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
  if (run_.comm) {
    // Every rank saves (ZeRO: its shard; all: its log window), so they must agree: rank 0's
    // clock decides, read at log steps only (one small collective where the host syncs anyway).
    if (t.checkpoint_every_min <= 0 || step % t.log_interval != 0) {
      by_time = false;
    } else {
      const at::Tensor flag = at::full({1}, by_time && run_.layout.is_rank0() ? 1.0f : 0.0f,
                                       at::TensorOptions().device(run_.device));
      run_.comm->all_reduce(flag, dist::ReduceOp::kMax);
      by_time = flag.item<float>() > 0;
    }
  }
  return (t.checkpoint_interval > 0 && step % t.checkpoint_interval == 0) || step == t.steps || by_time;
}

nlohmann::json Checkpointer::save_shards(int64_t step) {
  dist::Communicator& comm = *run_.comm;
  const int all = comm.world_size(), me = comm.rank();
  // ZeRO-3: the ranks of the first shard group write (under hybrid sharding the other groups
  // hold copies of the same shards); they are ranks 0..world-1.
  const dist::FullyShardedModel* sharded = run_.session->fully_sharded();
  const int world = sharded ? sharded->shard_group_size() : all;
  const bool writes = me < world;
  // Each rank's outcome and CRC32C go to every rank in one SUM all-reduce: [failed..., crc...].
  at::Tensor report = at::zeros({2 * all}, at::TensorOptions().dtype(at::kLong).device(run_.device));
  std::string error;
  try {
    if (writes) {
      checkpoint::Checkpoint shard = checkpoint::make_optimizer_shard(run_.session->optimizer(), me, world, step);
      for (const auto& part : owned_parameter_parts(*run_.session)) shard.tensors["model." + part.name] = part.flat;
      const uint32_t crc =
          checkpoint::save_checkpoint(path_.parent_path() / checkpoint::shard_file_name(me, world, step), shard);
      report[all + me] = static_cast<int64_t>(crc);
    }
  } catch (const Error& e) {
    error = e.what();
    report[me] = 1;
  }
  comm.all_reduce(report, dist::ReduceOp::kSum);
  const at::Tensor host = report.cpu();
  for (int r = 0; r < all; ++r) {
    if (host[r].item<int64_t>() == 0) continue;
    FP8T_THROW(ExitCode::kTrainingFailed, !error.empty() ? error : fmt::format("rank {} could not write its "
               "optimizer shard", r), " (the previous checkpoint ", path_.string(), " and its shards are intact; "
               "free space and continue with --resume)");
  }
  nlohmann::json shards = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    shards.push_back({{"file", checkpoint::shard_file_name(r, world, step)}, {"crc32c", host[all + r].item<int64_t>()}});
  }
  nlohmann::json manifest = {{"world_size", world}, {"step", step}, {"shards", shards}};
  if (sharded) {
    manifest["level"] = zero_level(ZeroStage::kFull);
    manifest["model"] = parameter_shapes(*run_.session);  // the weights are in the shard files
  }
  return manifest;
}

std::string Checkpointer::unsafe_state(const step::StepHealth::Counts& health) const {
  if (health.diverged_at > 0) {
    return fmt::format("the run diverged at step {} ({} non-finite steps in a row)", health.diverged_at,
                       run_.cfg.train.max_skipped_steps);
  }
  // Skipped steps never change the weights, so this only fires for weights that a finite but
  // huge update pushed out of range. One reduction over the parameters (ZeRO-3: this rank's
  // parts, and one collective so that every rank decides the same), one read.
  std::vector<at::Tensor> finite;
  for (const auto& part : owned_parameter_parts(*run_.session)) finite.push_back(at::isfinite(part.flat).all());
  at::Tensor ok = finite.empty() ? at::ones({1}, at::TensorOptions().device(run_.device))
                                 : at::stack(finite).all().to(at::kFloat).reshape({1});
  if (run_.session->fully_sharded() != nullptr) {
    at::Tensor bad = 1.0 - ok;
    run_.comm->all_reduce(bad, dist::ReduceOp::kMax);
    ok = 1.0 - bad;
  }
  if (ok.item<float>() < 0.5f) return "a weight is not finite";
  return "";
}

void Checkpointer::save(int64_t step, const Progress& progress, const LogWindow& window, bool scheduled) {
  const bool sharded = run_.session->optimizer().sharded() && run_.comm;
  // ZeRO-1: every rank decides the same (the counters and the weights are the same everywhere).
  const step::StepHealth::Counts health = run_.session->health().read();  // the host's read before a write
  if (scheduled && step < run_.cfg.train.steps && health.consecutive > 0) {
    // Skipped steps left the weights of the step before the streak: a checkpoint now would hold
    // them again and push an older checkpoint out of train.keep_checkpoints.
    if (run_.layout.is_rank0()) {
      spdlog::info("not writing the checkpoint after step {}: the last {} step(s) were skipped (non-finite), so it "
                   "would hold the weights of step {} again", step, health.consecutive, health.streak_start - 1);
    }
    return;
  }
  if (const std::string why = unsafe_state(health); !why.empty()) {
    if (run_.layout.is_rank0()) {
      spdlog::warn("not writing the checkpoint after step {}: {}; {} keeps the last good state", step, why,
                   path_.string());
    }
    return;
  }
  // Every rank's log window (one collective in a job), so that the resumed run's next row is this one's.
  const nlohmann::json log_window = log_window_meta(window, run_.comm.get(), run_.layout.rank, run_.layout.world_size);
  // Expert parallelism: every rank gathers its expert group's experts (collectives), rank 0 writes
  // them whole, so the checkpoint resumes on any layout.
  const std::map<std::string, at::Tensor> whole_experts = run_.session->whole_experts();
  checkpoint::Checkpoint ck;
  if (run_.layout.is_rank0()) {
    ck = make_checkpoint(run_, step, progress);
    ck.meta["log_window"] = log_window;
    for (const auto& [key, t] : whole_experts) ck.tensors[key] = t;
    ck.meta["skipped_steps"] = health.skipped;  // up to this step (progress holds the last log step's count)
    ck.meta["data_files"] = data_record_;  // what it was trained on, for the resume's check
    if (step == run_.cfg.train.steps) ck.meta["final_summary"] = summary_at(run_, progress, step);
  }
  if (sharded) ck.meta["zero"] = save_shards(step);  // every rank writes its shard first
  try {
    history_.before_save(step);  // every rank keeps the bookkeeping; rank 0 the files
    if (run_.layout.is_rank0()) checkpoint::save_checkpoint(path_, ck);
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
