#include "lib/train/trainer.h"

#include <spdlog/spdlog.h>  // spdlog::info
#include <torch/torch.h>    // torch::cuda, torch::manual_seed

#include <atomic>   // std::atomic
#include <chrono>   // std::chrono
#include <cmath>    // std::isfinite, std::log
#include <csignal>  // std::signal
#include <filesystem>  // std::filesystem::path
#include <memory>   // std::shared_ptr
#include <optional>  // std::optional

#include "lib/config/fields.h"        // config::to_string
#include "lib/config/print.h"         // config::to_yaml
#include "lib/data/dataset.h"         // data::Dataset
#include "lib/dist/communicator.h"   // dist::Communicator
#include "lib/dist/grad_sync.h"      // dist::GradientSync
#include "lib/fp8/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/model/gpt.h"            // model::Gpt
#include "lib/train/checkpoint.h"     // save_checkpoint
#include "lib/train/console.h"        // StatusLine
#include "lib/train/lr_schedule.h"    // learning_rate
#include "lib/train/metrics.h"        // MetricsWriter
#include "lib/train/optimizer.h"      // AdamW
#include "lib/train/run_dir.h"        // RunDir
#include "lib/train/session.h"        // Session
#include "lib/util/error.h"           // FP8T_THROW
#include "lib/util/log.h"             // setup_logging
#include "lib/util/memory.h"          // peak_memory_bytes
#include "lib/util/timer.h"           // Stopwatch

namespace fp8t {
namespace train {

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

// Everything a step needs, built once.
struct Run {
  const ExperimentConfig& cfg;
  Session& session;
  data::Dataset data;
  dist::Communicator* comm = nullptr;  // null for a single process
  int world_size = 1;
};

// Mean validation loss over all ranks (each evaluates its rows of every global batch).
double evaluate(Run& run) {
  const TrainSection& t = run.cfg.train;
  at::Tensor total = run.session.eval_loss_sum(
      [&](int64_t i) { return run.data.val_batch(i, t.micro_batch_size); }, t.eval_batches);
  if (run.comm) run.comm->all_reduce(total, dist::ReduceOp::kSum);
  return total.item<double>() / static_cast<double>(t.eval_batches * run.world_size);
}

// Largest difference of any FP8 scale between two ranks (0: every rank uses identical scales):
// one MAX all-reduce of [scale, -scale] gives the maximum and minus the minimum per slot.
double scale_spread_across_ranks(dist::Communicator& comm, const fp8::DelayedScaling& scaling) {
  const at::Tensor both = at::cat({scaling.scale(), -scaling.scale()});
  comm.all_reduce(both, dist::ReduceOp::kMax);
  const int64_t slots = scaling.scale().numel();
  return (both.narrow(0, 0, slots) + both.narrow(0, slots, slots)).abs().max().item<double>();
}

Checkpoint make_checkpoint(const Run& run, int64_t step, const nlohmann::json& progress) {
  Checkpoint ck;
  for (const auto& [name, p] : run.session.model().unique_named_parameters()) ck.tensors["model." + name] = p.detach();
  for (const auto& [k, v] : run.session.optimizer().state_dict()) ck.tensors["optim." + k] = v;
  if (const auto* scaling = run.session.scaling()) {
    for (const auto& [k, v] : scaling->state_dict()) ck.tensors[k] = v;
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  ck.tensors["rng.cpu"] = gen.get_state();
  ck.meta = progress;
  ck.meta["step"] = step;
  ck.meta["data_position"] = run.data.train_position();
  ck.meta["precision"] = config::to_string(run.cfg.precision);
  ck.meta["world_size"] = run.world_size;
  return ck;
}

void restore_checkpoint(Run& run, const Checkpoint& ck) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : run.session.model().unique_named_parameters()) {
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
  run.session.optimizer().load_state_dict(optim);
  if (auto* scaling = run.session.scaling()) scaling->load_state_dict(fp8_state);
  const auto rng = ck.tensors.find("rng.cpu");
  FP8T_INPUT_CHECK(rng != ck.tensors.end(), "checkpoint has no RNG state");
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng->second);
  run.data.set_train_position(ck.meta.at("data_position").get<int64_t>());
}

nlohmann::json fp8_stats_json(fp8::DelayedScaling& scaling) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : scaling.read_stats()) {
    rows.push_back({{"slot", s.name}, {"format", s.format}, {"amax", s.amax}, {"scale", s.scale},
                    {"saturated", s.saturated}, {"underflow", s.underflow}});
  }
  return rows;
}

// The slots with the largest saturation and underflow fractions seen over the run.
nlohmann::json worst_offenders(const nlohmann::json& worst_by_slot) {
  std::vector<std::pair<double, std::string>> sat, under;
  for (const auto& [slot, v] : worst_by_slot.items()) {
    sat.emplace_back(v.at("saturated").get<double>(), slot);
    under.emplace_back(v.at("underflow").get<double>(), slot);
  }
  auto top = [](std::vector<std::pair<double, std::string>> v) {
    std::sort(v.rbegin(), v.rend());
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < v.size() && i < 5; ++i) out.push_back({{"slot", v[i].second}, {"fraction", v[i].first}});
    return out;
  };
  return {{"most_saturated", top(sat)}, {"most_underflow", top(under)}};
}

}  // namespace

at::Device resolve_device(DeviceKind kind, int local_rank) {
  const bool gpu = torch::cuda::is_available();
  if (kind == DeviceKind::kCuda) {
    FP8T_INPUT_CHECK(gpu, "run.device is cuda but no CUDA GPU is visible (use run.device: auto or cpu)");
  }
  if (kind == DeviceKind::kCpu || !gpu) return at::Device(at::kCPU);
  const int visible = static_cast<int>(torch::cuda::device_count());
  FP8T_INPUT_CHECK(local_rank < visible, "LOCAL_RANK=", local_rank, " but only ", visible,
                   " CUDA device(s) are visible: start at most one process per GPU (torchrun --nproc-per-node)");
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

nlohmann::json run_training(const config::LoadedConfig& loaded, const TrainOptions& options) {
  const ExperimentConfig& cfg = loaded.config;
  const TrainSection& t = cfg.train;
  const dist::LaunchInfo& launch = options.launch;
  const bool main_rank = launch.is_main();
  // Other ranks log warnings and errors only, to the console.
  setup_logging(cfg.run.quiet || !main_rank, "");

  // ---- checks and construction: nothing is written until all of this succeeded ----------
  const at::Device device = resolve_device(cfg.run.device, launch.local_rank);
  const RunDir::Mode mode = options.resume ? RunDir::Mode::kResume
                            : cfg.run.overwrite ? RunDir::Mode::kOverwrite : RunDir::Mode::kCreate;
  // Every rank checks (read-only) before the rendezvous, so a bad run folder stops all of them.
  if (!options.dry_run) RunDir::check(cfg.run.out_dir, cfg.run.name, mode);

  data::Dataset dataset = data::Dataset::open(cfg.data, cfg.model, cfg.run.seed, launch.rank, launch.world_size);
  FP8T_INPUT_CHECK(dataset.vocab_size_needed() <= cfg.model.vocab_size, "the data uses token ids up to ",
                   dataset.vocab_size_needed() - 1, " but model.vocab_size is ", cfg.model.vocab_size);

  Session session(cfg, device);
  const model::Gpt& gpt = session.model();
  Run run{cfg, session, std::move(dataset), nullptr, launch.world_size};

  spdlog::info("fp8train: {} on {} | model {:.2f}M params, {} layers, d_model {} | precision {}{}",
               cfg.run.name, device.str(), gpt.parameter_count() / 1e6, cfg.model.n_layer, cfg.model.d_model,
               config::to_string(cfg.precision),
               cfg.precision == Precision::kFp8 && device.is_cpu() ? " (emulated on CPU: exact FP8 casts, FP32 GEMMs)"
               : cfg.precision == Precision::kBf16 && device.is_cpu() ? " (CPU autocast to bf16)" : "");
  spdlog::info("data: {}", run.data.describe());
  if (auto floor = run.data.entropy_floor_nats()) {
    spdlog::info("data: entropy floor {:.4f} nats/token (the best achievable loss); ln(vocab) = {:.4f}", *floor,
                 std::log(static_cast<double>(cfg.model.vocab_size)));
  }
  if (const fp8::DelayedScaling* scaling = session.scaling()) {
    spdlog::info("{}", session.rewrite_report());
    spdlog::info("fp8 recipe: format {}, margin {}, interval {}, amax history {} ({}), override fprop/dgrad/wgrad "
                 "{}/{}/{}, {} FP8 tensor slots", fp8::to_string(cfg.fp8.fp8_format), cfg.fp8.margin,
                 cfg.fp8.interval, cfg.fp8.amax_history_len, fp8::to_string(cfg.fp8.amax_compute_algo),
                 cfg.fp8.override_linear_precision.fprop, cfg.fp8.override_linear_precision.dgrad,
                 cfg.fp8.override_linear_precision.wgrad, scaling->num_slots());
  }
  const int64_t tokens_per_step = t.micro_batch_size * cfg.model.seq_len * t.grad_accum_steps * launch.world_size;
  spdlog::info("plan: {} steps x {} tokens ({} micro-batches of {}x{}{}), {:.3g} model FLOPs/token", t.steps,
               tokens_per_step, t.grad_accum_steps, t.micro_batch_size, cfg.model.seq_len,
               launch.world_size > 1 ? fmt::format(" on each of {} ranks", launch.world_size) : "",
               gpt.flops_per_token());
  if (options.dry_run) {
    nlohmann::json plan = {{"status", "dry-run"}, {"parameters", gpt.parameter_count()},
                           {"device", device.str()}, {"precision", config::to_string(cfg.precision)}};
    if (!session.rewrite_report().empty()) plan["fp8_rewrite"] = session.rewrite_report();
    return plan;
  }

  // ---- the data-parallel job (torchrun) ----------------------------------------------------
  std::shared_ptr<dist::Communicator> comm;
  if (launch.launched) {
    spdlog::info("data-parallel: joining as {} (timeout {} s)", launch.describe(), cfg.dist.timeout_s);
    comm = dist::Communicator::connect(launch, device, std::chrono::seconds(cfg.dist.timeout_s));
    run.comm = comm.get();
  }
  session.prepare_training(comm);
  if (comm) {
    spdlog::info("data-parallel: {} ranks over {}, {} gradient buckets of up to {} MiB; global batch {} tokens",
                 comm->world_size(), comm->backend_name(), session.gradient_sync()->num_buckets(),
                 cfg.dist.bucket_mb, tokens_per_step);
  }

  // ---- run folder (rank 0 only) ---------------------------------------------------------
  const RunDir dir = main_rank ? RunDir::open(cfg.run.out_dir, cfg.run.name, mode)
                               : RunDir::locate(cfg.run.out_dir, cfg.run.name);
  if (main_rank) setup_logging(cfg.run.quiet, dir.log_path().string());
  const std::filesystem::path checkpoint_path = dir.checkpoint_path();
  int64_t start_step = 0;
  nlohmann::json progress = {{"best_val_loss", nullptr}, {"tokens", 0}, {"elapsed_s", 0.0}};
  if (options.resume) {
    // Every rank reads the checkpoint (on several nodes the run folder must be on shared storage).
    const Checkpoint ck = load_checkpoint(checkpoint_path);
    const int saved_world = ck.meta.value("world_size", 1);
    FP8T_INPUT_CHECK(saved_world == launch.world_size, "the checkpoint ", checkpoint_path.string(),
                     " was written by a job of ", saved_world, " rank(s); resume it with the same number (now ",
                     launch.world_size, ")");
    restore_checkpoint(run, ck);
    start_step = ck.meta.at("step").get<int64_t>();
    for (const char* k : {"best_val_loss", "tokens", "elapsed_s"}) {
      if (ck.meta.contains(k)) progress[k] = ck.meta[k];
    }
    if (main_rank) truncate_metrics_after(dir.metrics_path(), start_step);
    spdlog::info("resumed {} at step {}", checkpoint_path.string(), start_step);
    FP8T_INPUT_CHECK(start_step < t.steps, "the checkpoint is at step ", start_step, " and train.steps is ", t.steps,
                     ": nothing to do (raise --steps to train further)");
  }
  std::optional<MetricsWriter> metrics;
  if (main_rank) {
    dir.write_text_atomic("config.yaml", config::to_yaml(cfg));
    metrics.emplace(dir.metrics_path());
  }
  auto write_metrics = [&](const nlohmann::json& row) {
    if (metrics) metrics->write(row);
  };
  StatusLine status(cfg.run.quiet || !main_rank);

  g_signal.store(0);
  auto prev_int = std::signal(SIGINT, on_signal);
  auto prev_term = std::signal(SIGTERM, on_signal);
  struct RestoreSignals {
    decltype(prev_int) a, b;
    ~RestoreSignals() { std::signal(SIGINT, a); std::signal(SIGTERM, b); }
  } restore_signals{prev_int, prev_term};

  reset_peak_memory(device);
  const double elapsed_before = progress["elapsed_s"].get<double>();
  int64_t tokens = progress["tokens"].get<int64_t>();
  std::optional<double> best_val;
  if (!progress["best_val_loss"].is_null()) best_val = progress["best_val_loss"].get<double>();
  std::optional<double> last_val;
  double last_loss = std::nan("");
  nlohmann::json worst_fp8 = nlohmann::json::object();
  double max_scale_spread = 0.0;
  std::string status_text = "completed";
  Stopwatch wall;
  Stopwatch window;
  int64_t window_tokens = 0;
  const at::TensorOptions fopts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor loss_sum = at::zeros({}, fopts);  // summed on the device between log steps
  int64_t loss_count = 0;
  fp8::DelayedScaling* scaling = session.scaling();

  auto save = [&](int64_t step) {
    if (!main_rank) return;
    progress["best_val_loss"] = best_val ? nlohmann::json(*best_val) : nlohmann::json(nullptr);
    progress["tokens"] = tokens;
    progress["elapsed_s"] = elapsed_before + wall.seconds();
    save_checkpoint(checkpoint_path, make_checkpoint(run, step, progress));
  };

  int64_t step = start_step;
  try {
    for (; step < t.steps; ++step) {
      const bool log_step = (step + 1) % t.log_interval == 0 || step + 1 == t.steps || step == start_step;
      if (scaling) scaling->set_collect_stats(cfg.fp8.stats && log_step);
      const double lr = learning_rate(t, step);

      const at::Tensor grad_norm =
          session.step([&] { return run.data.next_train(t.micro_batch_size); }, lr, loss_sum);
      loss_count += t.grad_accum_steps;
      tokens += tokens_per_step;
      window_tokens += tokens_per_step;

      // A signal stops a single process after this step; the ranks of a job agree on it at the
      // next log step (one collective there), so that all of them stop after the same step.
      bool stop_signal = !comm && g_signal.load() != 0;
      if (log_step) {
        double loss_total = 0.0;
        if (comm) {
          at::Tensor packed = at::stack({loss_sum, at::full({}, g_signal.load() != 0 ? 1.0f : 0.0f, fopts)});
          comm->all_reduce(packed, dist::ReduceOp::kSum);
          const at::Tensor host = packed.cpu();
          loss_total = host[0].item<double>();
          stop_signal = host[1].item<float>() > 0.0f;
        } else {
          loss_total = loss_sum.item<double>();  // the one host read
        }
        const double loss = loss_total / static_cast<double>(loss_count * launch.world_size);
        const double gnorm = grad_norm.item<double>();
        loss_sum.zero_();
        loss_count = 0;
        last_loss = loss;
        const double tok_s = window_tokens / std::max(1e-9, window.seconds());
        window.reset();
        window_tokens = 0;
        nlohmann::json row = {{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm},
                              {"tokens_per_s", tok_s}, {"elapsed_s", elapsed_before + wall.seconds()}};
        if (scaling && comm) {
          const double spread = scale_spread_across_ranks(*comm, *scaling);
          row["fp8_scale_spread_across_ranks"] = spread;
          if (spread != 0.0 && max_scale_spread == 0.0) {
            spdlog::warn("fp8: the ranks use different scales at step {} (largest difference {}); the amax "
                         "reduction is not working", step + 1, spread);
          }
          max_scale_spread = std::max(max_scale_spread, spread);
        }
        if (scaling && cfg.fp8.stats) {
          row["fp8"] = fp8_stats_json(*scaling);
          for (const auto& s : row["fp8"]) {
            auto& w = worst_fp8[s["slot"].get<std::string>()];
            if (w.is_null()) w = {{"saturated", 0.0}, {"underflow", 0.0}};
            w["saturated"] = std::max(w.value("saturated", 0.0), s["saturated"].get<double>());
            w["underflow"] = std::max(w.value("underflow", 0.0), s["underflow"].get<double>());
          }
        }
        write_metrics(row);
        const double remaining = (t.steps - step - 1) * (wall.seconds() / static_cast<double>(step + 1 - start_step));
        status.update(StatusFields{step + 1, t.steps, loss, lr, gnorm, tok_s, remaining});
        if (!std::isfinite(loss)) {
          status_text = "diverged";
          FP8T_THROW(ExitCode::kTrainingFailed, "the loss became ", loss, " at step ", step + 1,
                     (cfg.precision == Precision::kFp8 ? " (try fp8.margin, fp8.override_linear_precision or "
                                                         "precision bf16 to locate it; fp8.stats shows saturation)"
                                                       : " (try a lower train.lr or train.grad_clip)"));
        }
      }
      const bool last = step + 1 == t.steps;
      if ((t.eval_interval > 0 && (step + 1) % t.eval_interval == 0) || last) {
        last_val = evaluate(run);
        if (!best_val || *last_val < *best_val) best_val = last_val;
        write_metrics({{"step", step + 1}, {"val_loss", *last_val}, {"elapsed_s", elapsed_before + wall.seconds()}});
        status.print(fmt::format("step {}/{} | val_loss {:.4f}", step + 1, t.steps, *last_val));
      }
      if ((t.checkpoint_interval > 0 && (step + 1) % t.checkpoint_interval == 0) || last) save(step + 1);
      if (options.stop_after > 0 && step + 1 - start_step >= options.stop_after && !last) {
        save(step + 1);
        status_text = "stopped";
        ++step;
        break;
      }
      if (stop_signal && !last) {
        save(step + 1);
        status_text = "interrupted";
        ++step;
        break;
      }
    }
  } catch (const Error& e) {
    status.finish();
    if (e.code() == ExitCode::kTrainingFailed && main_rank) {
      // "diverged" for a non-finite loss, "failed" for anything else (e.g. a rank died).
      if (status_text == "completed") status_text = "failed";
      write_summary(dir.summary_path(), {{"status", status_text}, {"steps", step + 1}, {"error", e.what()}});
    }
    throw;
  }
  status.finish();

  const double wall_s = wall.seconds();
  nlohmann::json summary = {
      {"status", status_text},
      {"run", cfg.run.name},
      {"precision", config::to_string(cfg.precision)},
      {"device", device.str()},
      {"world_size", launch.world_size},
      {"steps", step},
      {"tokens", tokens},
      {"final_loss", last_loss},
      {"final_val_loss", last_val ? nlohmann::json(*last_val) : nlohmann::json(nullptr)},
      {"best_val_loss", best_val ? nlohmann::json(*best_val) : nlohmann::json(nullptr)},
      {"wall_time_s", elapsed_before + wall_s},
      {"tokens_per_s", (step - start_step) * tokens_per_step / std::max(1e-9, wall_s)},
      {"peak_memory_bytes", peak_memory_bytes(device)},
      {"parameters", gpt.parameter_count()},
  };
  if (auto floor = run.data.entropy_floor_nats()) summary["entropy_floor"] = *floor;
  if (scaling && cfg.fp8.stats) summary["fp8_worst"] = worst_offenders(worst_fp8);
  if (scaling && comm) summary["fp8_max_scale_spread_across_ranks"] = max_scale_spread;
  if (main_rank) {
    write_summary(dir.summary_path(), summary);
    spdlog::info("{}: {} steps, final loss {:.4f}, val {:.4f}, {:.0f} tokens/s, {:.1f}s -> {}", status_text, step,
                 last_loss, last_val.value_or(std::nan("")), summary["tokens_per_s"].get<double>(), wall_s,
                 dir.path().string());
  }
  if (status_text == "interrupted") {
    FP8T_THROW(ExitCode::kInterrupted, "interrupted; checkpoint saved in ",
               dir.path().string(), " (continue with --resume)");
  }
  return summary;
}

}  // namespace train
}  // namespace fp8t
