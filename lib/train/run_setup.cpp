#include "lib/train/run_setup.h"

#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::info

#include <chrono>   // std::chrono::seconds
#include <cmath>    // std::log
#include <utility>  // std::move

#include "lib/config/fields.h"              // config::to_string
#include "lib/dist/communicator.h"          // dist::Communicator
#include "lib/dist/fingerprint.h"           // dist::check_same_on_every_rank
#include "lib/dist/fully_sharded.h"         // dist::FullyShardedModel
#include "lib/dist/grad_sync.h"             // dist::GradientSync
#include "lib/config/fp8_recipe_fields.h"   // recipe_fields_in_effect, recipe_fields_without_effect, recipe_traits
#include "lib/fp8/recipes/scaling.h"        // fp8::Scaling
#include "lib/model/model.h"                // model::Model
#include "lib/train/job_fingerprint.h"      // job_fingerprint, input_files
#include "lib/train/precision_chart.h"      // precision_chart
#include "lib/plan/memory_plan.h"           // plan_memory, format_memory_plan
#include "lib/plan/resources.h"             // check_memory_fits
#include "lib/run/tensorboard.h"            // check_tensorboard_available
#include "lib/util/error.h"                 // FP8T_INPUT_CHECK

namespace fp8t::train {

namespace {

run::RunDir::Mode run_dir_mode(const ExperimentConfig& cfg, const TrainOptions& options) {
  if (options.resume) return run::RunDir::Mode::kResume;
  return cfg.run.overwrite ? run::RunDir::Mode::kOverwrite : run::RunDir::Mode::kCreate;
}

// The recipe fields that take effect under the chosen recipe, for the plan line (the recipe's own).
std::string recipe_settings(const fp8::Recipe& r) { return fp8::recipe_traits(r.kind).settings_line(r); }

// The first lines of every run: what trains where, on which data, with which FP8 recipe.
void log_plan(const TrainingJob& run) {
  const ExperimentConfig& cfg = run.cfg;
  const TrainSection& t = cfg.train;
  const model::Model& net = run.session->model();
  spdlog::info("fp8train: {} on {} | model {:.2f}M params, {} layers, d_model {} | precision {}{}",
               cfg.run.name, run.device.str(), net.parameter_count() / 1e6, cfg.model.n_layer, cfg.model.d_model,
               config::to_string(cfg.precision),
               cfg.precision == Precision::kFp8 && run.device.is_cpu() ? " (emulated on CPU: exact FP8 casts, FP32 GEMMs)"
               : cfg.precision == Precision::kBf16 && run.device.is_cpu() ? " (CPU autocast to bf16)"
               : cfg.precision == Precision::kFp16 && run.device.is_cpu() ? " (CPU autocast to fp16)" : "");
  spdlog::info("data: {}", run.data.describe());
  if (run.layout.is_rank0()) {
    for (const std::string& warning : run.data.warnings()) spdlog::warn("data: {}", warning);
  }
  if (run.data.epoch() && run.data.tokens_per_epoch() > 0) {
    spdlog::info("data: {} training tokens, {} per epoch; {} steps x {} tokens = {:.3g} epochs", run.data.train_tokens(),
                 run.data.tokens_per_epoch(), t.steps, run.tokens_per_step,
                 static_cast<double>(t.steps * run.tokens_per_step) / static_cast<double>(run.data.tokens_per_epoch()));
  }
  if (auto floor = run.data.entropy_floor_nats()) {
    spdlog::info("data: entropy floor {:.4f} nats/token (the best achievable loss); ln(vocab) = {:.4f}", *floor,
                 std::log(static_cast<double>(cfg.model.vocab_size)));
  }
  if (const fp8::Scaling* scaling = run.scaling()) {
    spdlog::info("{}", run.session->rewrite_report());
    spdlog::info("fp8 recipe {}: {}override fprop/dgrad/wgrad {}/{}/{}, {} FP8 tensor slots",
                 fp8::to_string(scaling->kind()), recipe_settings(cfg.fp8), cfg.fp8.override_linear_precision.fprop,
                 cfg.fp8.override_linear_precision.dgrad, cfg.fp8.override_linear_precision.wgrad,
                 scaling->num_slots());
  }
  spdlog::info("plan: {} steps x {} tokens ({} micro-batches of {}x{}{}), {:.3g} model FLOPs/token", t.steps,
               run.tokens_per_step, t.grad_accum_steps, t.micro_batch_size, cfg.model.seq_len,
               run.layout.world_size > 1 ? fmt::format(" on each of {} ranks", run.layout.world_size) : "",
               net.flops_per_token());
}

}  // namespace

TrainingJob setup_job(const config::LoadedConfig& loaded, const TrainOptions& options) {
  const ExperimentConfig& cfg = loaded.config;
  const dist::LaunchInfo& launch = options.launch;
  const c10::Device device = resolve_device(cfg.run.device, launch.local_rank);
  const run::RunDir::Mode mode = run_dir_mode(cfg, options);
  // Sizes that cannot fit stop here (exit 2, naming the keys), before any allocation or file.
  const ParallelLayout layout = ParallelLayout::of(cfg.dist, launch.rank, launch.world_size);
  plan::check_memory_fits(cfg, plan::device_memory_capacity(device), device.str(), layout);
  run::check_tensorboard_available(cfg.run.tensorboard);  // a build without protobuf: exit 2, nothing written
  // Every rank checks (read-only) before the rendezvous, so a bad run folder stops all of them.
  if (!options.dry_run) run::RunDir::check(cfg.run.out_dir, cfg.run.name, mode);

  data::Dataset dataset = data::Dataset::open(cfg.data, cfg.model, cfg.run.seed, layout);
  FP8T_INPUT_CHECK(dataset.vocab_size_needed() <= cfg.model.vocab_size, "the data uses token ids up to ",
                   dataset.vocab_size_needed() - 1, " but model.vocab_size is ", cfg.model.vocab_size);

  auto session = std::make_unique<step::Session>(cfg, device, layout);
  TrainingJob run{cfg, options, device, mode, std::move(dataset), std::move(session), nullptr, layout};
  run.tokens_per_step =
      cfg.train.micro_batch_size * cfg.model.seq_len * cfg.train.grad_accum_steps * launch.world_size;
  log_plan(run);
  return run;
}

nlohmann::json dry_run_plan(const TrainingJob& run) {
  nlohmann::json plan = {{"status", "dry-run"}, {"parameters", run.session->model().parameter_count()},
                         {"device", run.device.str()}, {"precision", config::to_string(run.cfg.precision)}};
  if (!run.session->rewrite_report().empty()) plan["fp8_rewrite"] = run.session->rewrite_report();
  if (run.data.epoch()) {
    plan["data"] = {{"train_files", run.data.train_files()}, {"train_tokens", run.data.train_tokens()},
                    {"tokens_per_epoch", run.data.tokens_per_epoch()},
                    {"order", config::to_string(run.cfg.data.order)}};
  }
  if (const fp8::Scaling* scaling = run.scaling()) {
    plan["fp8_recipe"] = {{"recipe", fp8::to_string(scaling->kind())},
                          {"keys_in_effect", fp8::recipe_fields_in_effect(scaling->kind())},
                          {"keys_without_effect", fp8::recipe_fields_without_effect(scaling->kind())}};
  }
  // The optimizer and the process group do not exist yet: the chart applies their rules.
  const PrecisionChart chart = precision_chart(*run.session, run.layout.world_size);
  spdlog::info("{}", chart.to_string());
  plan["precision_chart"] = chart.to_json();
  // The memory per rank on this device and these ranks (setup_job checked that it fits).
  const plan::MemoryPlan memory =
      plan::plan_memory(run.cfg, {run.layout.world_size, plan::device_memory_capacity(run.device), run.device.str()});
  std::string table = plan::format_memory_plan(memory);
  if (!table.empty() && table.back() == '\n') table.pop_back();
  spdlog::info("{}", table);
  plan["memory_estimate_bytes_per_rank"] = memory.estimate.total_bytes();
  return plan;
}

void join_job(TrainingJob& run) {
  const dist::LaunchInfo& launch = run.options.launch;
  if (launch.launched) {
    spdlog::info("data-parallel: joining as {} (timeout {} s)", launch.describe(), run.cfg.dist.timeout_s);
    run.comm = dist::Communicator::connect(launch, run.device, std::chrono::seconds(run.cfg.dist.timeout_s));
    // One job, one configuration: a rank given another config or other data files stops every rank (exit 2).
    const std::vector<dist::FingerprintItem> job = job_fingerprint(run.cfg);
    dist::check_same_on_every_rank(*run.comm, run.device, job);
    spdlog::info("data-parallel: the {} ranks agree on the config and the {} input file(s)", run.comm->world_size(),
                 input_files(run.cfg).size());
  }
  run.session->prepare_training(run.comm);
  if (const dist::FullyShardedModel* sharded = run.session->fully_sharded()) {
    spdlog::info("data-parallel: {} ranks over {}, ZeRO-3 ({} units; weights, gradients and AdamW moments sharded "
                 "over {} ranks{}); global batch {} tokens",
                 run.comm->world_size(), run.comm->backend_name(), sharded->num_units(), sharded->shard_group_size(),
                 sharded->shard_group_size() < run.comm->world_size()
                     ? fmt::format(", replicated across {} groups", run.comm->world_size() / sharded->shard_group_size())
                     : std::string(),
                 run.tokens_per_step);
  } else if (run.comm) {
    spdlog::info("data-parallel: {} ranks over {}, {} gradient buckets of up to {} MiB{}; global batch {} tokens",
                 run.comm->world_size(), run.comm->backend_name(), run.session->gradient_sync()->num_buckets(),
                 run.cfg.dist.bucket_mb,
                 run.layout.shards_optimizer_state()
                     ? ", ZeRO-1 (reduce-scatter, AdamW moments sharded, weights all-gathered)"
                     : "",
                 run.tokens_per_step);
  } else if (run.layout.shards_optimizer_state()) {
    spdlog::info("dist.zero {} has no effect in a single process (launch with torchrun to shard across ranks)",
                 run.layout.zero_level());
  }
  // From the live optimizer, gradient sync and communicator (kept at the start of train.log).
  if (run.layout.is_rank0()) spdlog::info("{}", precision_chart(*run.session, run.layout.world_size).to_string());
}

}  // namespace fp8t::train
