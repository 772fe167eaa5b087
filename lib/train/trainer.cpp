#include "lib/train/trainer.h"

#include <spdlog/spdlog.h>  // spdlog::info
#include <torch/torch.h>    // torch::cuda, torch::manual_seed

#include <atomic>   // std::atomic
#include <chrono>   // std::chrono
#include <cmath>    // std::isfinite, std::log
#include <csignal>  // std::signal
#include <memory>   // std::shared_ptr

#include "lib/config/print.h"         // config::to_yaml
#include "lib/data/dataset.h"         // data::Dataset
#include "lib/fp8/rewrite.h"          // fp8::rewrite_to_fp8
#include "lib/model/gpt.h"            // model::Gpt
#include "lib/train/checkpoint.h"     // save_checkpoint
#include "lib/train/console.h"        // StatusLine
#include "lib/train/grad_clip.h"      // clip_grad_norm_
#include "lib/train/lr_schedule.h"    // learning_rate
#include "lib/train/metrics.h"        // MetricsWriter
#include "lib/train/optimizer.h"      // AdamW
#include "lib/train/run_dir.h"        // RunDir
#include "lib/util/error.h"           // FP8T_THROW
#include "lib/util/log.h"             // setup_logging
#include "lib/util/memory.h"          // peak_memory_bytes
#include "lib/util/timer.h"           // Stopwatch
#include "lib/util/torch_compat.h"    // compat::AutocastGuard

namespace fp8t {
namespace train {

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

// Everything a step needs, built once.
struct Run {
  const ExperimentConfig& cfg;
  at::Device device;
  std::shared_ptr<model::Gpt> gpt;
  std::shared_ptr<fp8::DelayedScaling> scaling;  // null unless precision fp8
  data::Dataset data;
  at::ScalarType autocast_dtype = at::kFloat;
};

at::ScalarType autocast_dtype_for(const ExperimentConfig& cfg, const at::Device& device) {
  // FP8 runs keep everything outside the FP8 GEMMs in BF16 on the GPU (as TE does under
  // autocast); on the CPU emulation it is FP32 so that only the FP8 casts differ from fp32.
  if (cfg.precision == Precision::kBf16) return at::kBFloat16;
  if (cfg.precision == Precision::kFp8 && device.is_cuda()) return at::kBFloat16;
  return at::kFloat;
}

double evaluate(Run& run) {
  const TrainSection& t = run.cfg.train;
  run.gpt->eval();
  torch::NoGradGuard no_grad;
  compat::AutocastGuard autocast(run.device.type(), run.autocast_dtype);
  at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(run.device));
  for (int64_t i = 0; i < t.eval_batches; ++i) {
    const data::Batch b = run.data.val_batch(i, t.micro_batch_size);
    total += model::Gpt::loss(run.gpt->forward(b.inputs.to(run.device)), b.targets.to(run.device));
  }
  run.gpt->train();
  return total.item<double>() / static_cast<double>(t.eval_batches);
}

Checkpoint make_checkpoint(const Run& run, const AdamW& opt, int64_t step, const nlohmann::json& progress) {
  Checkpoint ck;
  for (const auto& [name, p] : run.gpt->unique_named_parameters()) ck.tensors["model." + name] = p.detach();
  for (const auto& [k, v] : opt.state_dict()) ck.tensors["optim." + k] = v;
  if (run.scaling) {
    for (const auto& [k, v] : run.scaling->state_dict()) ck.tensors[k] = v;
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  ck.tensors["rng.cpu"] = gen.get_state();
  ck.meta = progress;
  ck.meta["step"] = step;
  ck.meta["data_position"] = run.data.train_position();
  ck.meta["precision"] = precision_name(run.cfg.precision);
  return ck;
}

void restore_checkpoint(Run& run, AdamW& opt, const Checkpoint& ck) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : run.gpt->unique_named_parameters()) {
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
  opt.load_state_dict(optim);
  if (run.scaling) run.scaling->load_state_dict(fp8_state);
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

at::Device resolve_device(DeviceKind kind) {
  const bool gpu = torch::cuda::is_available();
  if (kind == DeviceKind::kCuda) {
    FP8T_INPUT_CHECK(gpu, "run.device is cuda but no CUDA GPU is visible (use run.device: auto or cpu)");
    return at::Device(at::kCUDA, 0);
  }
  if (kind == DeviceKind::kAuto && gpu) return at::Device(at::kCUDA, 0);
  return at::Device(at::kCPU);
}

nlohmann::json run_training(const config::LoadedConfig& loaded, const TrainOptions& options) {
  const ExperimentConfig& cfg = loaded.config;
  const TrainSection& t = cfg.train;
  setup_logging(cfg.run.quiet, "");

  // ---- checks and construction: nothing is written until all of this succeeded ----------
  const at::Device device = resolve_device(cfg.run.device);
  const RunDir::Mode mode = options.resume ? RunDir::Mode::kResume
                            : cfg.run.overwrite ? RunDir::Mode::kOverwrite : RunDir::Mode::kCreate;
  if (!options.dry_run) RunDir::check(cfg.run.out_dir, cfg.run.name, mode);

  data::Dataset dataset = data::Dataset::open(cfg.data, cfg.model, cfg.run.seed);
  FP8T_INPUT_CHECK(dataset.vocab_size_needed() <= cfg.model.vocab_size, "the data uses token ids up to ",
                   dataset.vocab_size_needed() - 1, " but model.vocab_size is ", cfg.model.vocab_size);

  torch::manual_seed(cfg.run.seed);
  auto gpt = std::make_shared<model::Gpt>(cfg.model);
  gpt->to(device);
  Run run{cfg, device, gpt, nullptr, std::move(dataset), autocast_dtype_for(cfg, device)};

  spdlog::info("fp8train: {} on {} | model {:.2f}M params, {} layers, d_model {} | precision {}{}",
               cfg.run.name, device.str(), gpt->parameter_count() / 1e6, cfg.model.n_layer, cfg.model.d_model,
               precision_name(cfg.precision),
               cfg.precision == Precision::kFp8 && device.is_cpu() ? " (emulated on CPU: exact FP8 casts, FP32 GEMMs)"
               : cfg.precision == Precision::kBf16 && device.is_cpu() ? " (CPU autocast to bf16)" : "");
  spdlog::info("data: {}", run.data.describe());
  if (auto floor = run.data.entropy_floor_nats()) {
    spdlog::info("data: entropy floor {:.4f} nats/token (the best achievable loss); ln(vocab) = {:.4f}", *floor,
                 std::log(static_cast<double>(cfg.model.vocab_size)));
  }
  std::string rewrite_text;
  if (cfg.precision == Precision::kFp8) {
    auto rewritten = fp8::rewrite_to_fp8(*gpt, cfg.fp8, device);
    run.scaling = rewritten.scaling;
    rewrite_text = rewritten.report.to_string();
    spdlog::info("{}", rewrite_text);
    spdlog::info("fp8 recipe: format {}, margin {}, interval {}, amax history {} ({}), override fprop/dgrad/wgrad "
                 "{}/{}/{}, {} FP8 tensor slots", fp8::to_string(cfg.fp8.fp8_format), cfg.fp8.margin,
                 cfg.fp8.interval, cfg.fp8.amax_history_len, fp8::to_string(cfg.fp8.amax_compute_algo),
                 cfg.fp8.override_linear_precision.fprop, cfg.fp8.override_linear_precision.dgrad,
                 cfg.fp8.override_linear_precision.wgrad, run.scaling->num_slots());
  }
  const int64_t tokens_per_step = t.micro_batch_size * cfg.model.seq_len * t.grad_accum_steps;
  spdlog::info("plan: {} steps x {} tokens ({} micro-batches of {}x{}), {:.3g} model FLOPs/token", t.steps,
               tokens_per_step, t.grad_accum_steps, t.micro_batch_size, cfg.model.seq_len, gpt->flops_per_token());
  if (options.dry_run) {
    nlohmann::json plan = {{"status", "dry-run"}, {"parameters", gpt->parameter_count()},
                           {"device", device.str()}, {"precision", precision_name(cfg.precision)}};
    if (!rewrite_text.empty()) plan["fp8_rewrite"] = rewrite_text;
    return plan;
  }

  AdamW opt(gpt->unique_named_parameters(), AdamWOptions::from(t));
  std::vector<at::Tensor> params;
  for (const auto& np : gpt->unique_named_parameters()) params.push_back(np.second);

  // ---- run folder ---------------------------------------------------------------------
  const RunDir dir = RunDir::open(cfg.run.out_dir, cfg.run.name, mode);
  setup_logging(cfg.run.quiet, dir.log_path().string());
  int64_t start_step = 0;
  nlohmann::json progress = {{"best_val_loss", nullptr}, {"tokens", 0}, {"elapsed_s", 0.0}};
  if (options.resume) {
    const Checkpoint ck = load_checkpoint(dir.checkpoint_path());
    restore_checkpoint(run, opt, ck);
    start_step = ck.meta.at("step").get<int64_t>();
    for (const char* k : {"best_val_loss", "tokens", "elapsed_s"}) {
      if (ck.meta.contains(k)) progress[k] = ck.meta[k];
    }
    truncate_metrics_after(dir.metrics_path(), start_step);
    spdlog::info("resumed {} at step {}", dir.checkpoint_path().string(), start_step);
    FP8T_INPUT_CHECK(start_step < t.steps, "the checkpoint is at step ", start_step, " and train.steps is ", t.steps,
                     ": nothing to do (raise --steps to train further)");
  }
  dir.write_text_atomic("config.yaml", config::to_yaml(cfg));
  MetricsWriter metrics(dir.metrics_path());
  StatusLine status(cfg.run.quiet);

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
  std::string status_text = "completed";
  Stopwatch wall;
  Stopwatch window;
  int64_t window_tokens = 0;
  const at::TensorOptions fopts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor loss_sum = at::zeros({}, fopts);  // summed on the device between log steps
  int64_t loss_count = 0;

  auto save = [&](int64_t step) {
    progress["best_val_loss"] = best_val ? nlohmann::json(*best_val) : nlohmann::json(nullptr);
    progress["tokens"] = tokens;
    progress["elapsed_s"] = elapsed_before + wall.seconds();
    save_checkpoint(dir.checkpoint_path(), make_checkpoint(run, opt, step, progress));
  };

  int64_t step = start_step;
  try {
    for (; step < t.steps; ++step) {
      const bool log_step = (step + 1) % t.log_interval == 0 || step + 1 == t.steps || step == start_step;
      if (run.scaling) run.scaling->set_collect_stats(cfg.fp8.stats && log_step);
      const double lr = learning_rate(t, step);

      // forward + backward over the micro-batches of this step
      {
        compat::AutocastGuard autocast(device.type(), run.autocast_dtype);
        for (int64_t micro = 0; micro < t.grad_accum_steps; ++micro) {
          const data::Batch b = run.data.next_train(t.micro_batch_size);
          const at::Tensor loss =
              model::Gpt::loss(gpt->forward(b.inputs.to(device, /*non_blocking=*/true)), b.targets.to(device, true));
          (loss / static_cast<double>(t.grad_accum_steps)).backward();
          loss_sum += loss.detach();
          ++loss_count;
        }
      }
      if (run.scaling) run.scaling->update();  // new scales for the next step (no host read)
      const at::Tensor grad_norm = clip_grad_norm_(params, t.grad_clip);
      opt.step(lr);
      opt.zero_grad();
      tokens += tokens_per_step;
      window_tokens += tokens_per_step;

      if (log_step) {
        const double loss = loss_sum.item<double>() / static_cast<double>(loss_count);  // the one host read
        const double gnorm = grad_norm.item<double>();
        loss_sum.zero_();
        loss_count = 0;
        last_loss = loss;
        const double tok_s = window_tokens / std::max(1e-9, window.seconds());
        window.reset();
        window_tokens = 0;
        nlohmann::json row = {{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm},
                              {"tokens_per_s", tok_s}, {"elapsed_s", elapsed_before + wall.seconds()}};
        if (run.scaling && cfg.fp8.stats) {
          row["fp8"] = fp8_stats_json(*run.scaling);
          for (const auto& s : row["fp8"]) {
            auto& w = worst_fp8[s["slot"].get<std::string>()];
            if (w.is_null()) w = {{"saturated", 0.0}, {"underflow", 0.0}};
            w["saturated"] = std::max(w.value("saturated", 0.0), s["saturated"].get<double>());
            w["underflow"] = std::max(w.value("underflow", 0.0), s["underflow"].get<double>());
          }
        }
        metrics.write(row);
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
        metrics.write({{"step", step + 1}, {"val_loss", *last_val}, {"elapsed_s", elapsed_before + wall.seconds()}});
        status.print(fmt::format("step {}/{} | val_loss {:.4f}", step + 1, t.steps, *last_val));
      }
      if ((t.checkpoint_interval > 0 && (step + 1) % t.checkpoint_interval == 0) || last) save(step + 1);
      if (options.stop_after > 0 && step + 1 - start_step >= options.stop_after && !last) {
        save(step + 1);
        status_text = "stopped";
        ++step;
        break;
      }
      if (g_signal.load() != 0) {
        save(step + 1);
        status_text = "interrupted";
        ++step;
        break;
      }
    }
  } catch (const Error& e) {
    status.finish();
    if (e.code() == ExitCode::kTrainingFailed) {
      write_summary(dir.summary_path(), {{"status", status_text}, {"steps", step + 1}, {"error", e.what()}});
    }
    throw;
  }
  status.finish();

  const double wall_s = wall.seconds();
  nlohmann::json summary = {
      {"status", status_text},
      {"run", cfg.run.name},
      {"precision", precision_name(cfg.precision)},
      {"device", device.str()},
      {"steps", step},
      {"tokens", tokens},
      {"final_loss", last_loss},
      {"final_val_loss", last_val ? nlohmann::json(*last_val) : nlohmann::json(nullptr)},
      {"best_val_loss", best_val ? nlohmann::json(*best_val) : nlohmann::json(nullptr)},
      {"wall_time_s", elapsed_before + wall_s},
      {"tokens_per_s", (step - start_step) * tokens_per_step / std::max(1e-9, wall_s)},
      {"peak_memory_bytes", peak_memory_bytes(device)},
      {"parameters", gpt->parameter_count()},
  };
  if (auto floor = run.data.entropy_floor_nats()) summary["entropy_floor"] = *floor;
  if (run.scaling && cfg.fp8.stats) summary["fp8_worst"] = worst_offenders(worst_fp8);
  write_summary(dir.summary_path(), summary);
  spdlog::info("{}: {} steps, final loss {:.4f}, val {:.4f}, {:.0f} tokens/s, {:.1f}s -> {}", status_text, step,
               last_loss, last_val.value_or(std::nan("")), summary["tokens_per_s"].get<double>(), wall_s,
               dir.path().string());
  if (status_text == "interrupted") FP8T_THROW(ExitCode::kInterrupted, "interrupted; checkpoint saved in ", dir.path().string(), " (continue with --resume)");
  return summary;
}

}  // namespace train
}  // namespace fp8t
