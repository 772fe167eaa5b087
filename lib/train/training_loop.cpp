#include "lib/train/training_loop.h"

#include <ATen/ATen.h>      // at::zeros, at::stack, at::cat, at::full
#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::warn

#include <algorithm>  // std::max
#include <cmath>      // std::isfinite
#include <limits>     // std::numeric_limits
#include <cstdlib>    // std::getenv, std::strtod
#include <functional>  // std::function

#include "lib/dist/communicator.h"    // dist::Communicator
#include "lib/fp8/recipes/scaling.h"  // fp8::Scaling
#include "lib/step/loss_scaler.h"     // LossScaler
#include "lib/model/model.h"          // model::Model::read_routing_stats
#include "lib/optim/lr_schedule.h"    // learning_rate
#include "lib/step/step_health.h"     // StepHealth
#include "lib/util/error.h"           // FP8T_THROW
#include "lib/util/memory.h"          // reset_peak_memory, peak_memory_bytes

namespace fp8t::train {

namespace {

// The per-tensor scales every rank must hold identically: all of them under delayed scaling
// (its amaxes are reduced), the weights' under current scaling (the weights are identical; the
// activations and gradients are each rank's own). Undefined for block scaling.
at::Tensor scales_ranks_share(const fp8::Scaling& scaling) {
  const fp8::RanksShareScales share = scaling.traits().ranks_share;
  if (!scaling.scale().defined() || share == fp8::RanksShareScales::kNone) return at::Tensor();
  if (share == fp8::RanksShareScales::kAll) return scaling.scale();
  std::vector<int64_t> weights;
  for (int i = 0; i < scaling.num_slots(); ++i) {
    if (scaling.slot_role(i) == fp8::TensorRole::kWeight) weights.push_back(i);
  }
  return scaling.scale().index_select(0, at::tensor(weights, at::kLong).to(scaling.scale().device()));
}

// Largest difference of any shared FP8 scale between two ranks (0: every rank uses identical
// scales): one MAX all-reduce of [scale, -scale] gives the maximum and minus the minimum per slot.
double scale_spread_across_ranks(dist::Communicator& comm, const fp8::Scaling& scaling) {
  const at::Tensor shared = scales_ranks_share(scaling);
  if (!shared.defined() || shared.numel() == 0) return 0.0;
  const at::Tensor both = at::cat({shared, -shared});
  comm.all_reduce(both, dist::ReduceOp::kMax);
  const int64_t slots = shared.numel();
  return (both.narrow(0, 0, slots) + both.narrow(0, slots, slots)).abs().max().item<double>();
}

nlohmann::json fp8_stats_json(fp8::Scaling& scaling) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : scaling.read_stats()) {
    nlohmann::json row = {{"slot", s.name}, {"format", s.format}, {"amax", s.amax}, {"scale", s.scale},
                          {"saturated", s.saturated}, {"underflow", s.underflow}};
    if (s.min_block_scale) row["block_scale_min"] = *s.min_block_scale;
    if (s.max_block_scale) row["block_scale_max"] = *s.max_block_scale;
    rows.push_back(std::move(row));
  }
  return rows;
}

// Mean validation loss over all ranks (each evaluates its rows of every global batch);
// `before_batch(i)` runs before batch i is read.
double evaluate(TrainingJob& run, const std::function<void(int64_t)>& before_batch) {
  const TrainSection& t = run.cfg.train;
  at::Tensor total = run.session->eval_loss_sum(
      [&](int64_t i) {
        before_batch(i);
        return run.data.val_batch(i, t.micro_batch_size);
      },
      t.eval_batches);
  if (run.comm) run.comm->all_reduce(total, dist::ReduceOp::kSum);
  return total.item<double>() / static_cast<double>(t.eval_batches * run.layout.world_size);
}

}  // namespace

// ---- log phase ----------------------------------------------------------------------------

StepLogger::StepLogger(TrainingJob& run, const run::RunDir& dir, Progress& progress)
    : run_(run), progress_(progress), status_(run.cfg.run.quiet || !run.layout.is_rank0()) {
  if (run.layout.is_rank0()) metrics_.emplace(dir.metrics_path());
  if (run.layout.is_rank0() && run.cfg.run.tensorboard) tensorboard_.emplace(dir.path(), progress.start_step);
  window_ = restore_log_window(progress.log_window, run.layout.rank, run.layout.world_size, run.device,
                               progress.skipped_steps);
}

bool StepLogger::is_log_step(int64_t step) const {
  const TrainSection& t = run_.cfg.train;
  return (step + 1) % t.log_interval == 0 || step + 1 == t.steps || step == 0;
}

void StepLogger::count_step() {
  window_.micro_batches += run_.cfg.train.grad_accum_steps;
  progress_.tokens += run_.tokens_per_step;
  window_tokens_ += run_.tokens_per_step;
}

// The loss summed since the previous log step over all ranks. In a job the same collective
// tells whether any rank received a signal, so that all of them stop after the same step.
double StepLogger::read_loss(bool signal_pending, bool& stop_signal) {
  const at::Tensor& sum = window_.loss_sum;
  if (!run_.comm) return sum.item<double>();  // the one host read
  const at::Tensor flag = at::full({}, signal_pending ? 1.0f : 0.0f, sum.options());
  at::Tensor packed = at::stack({sum, flag});
  run_.comm->all_reduce(packed, dist::ReduceOp::kSum);
  const at::Tensor host = packed.cpu();
  stop_signal = host[1].item<float>() > 0.0f;
  return host[0].item<double>();
}

LoggedStep StepLogger::log(const StepResult& result, bool signal_pending) {
  const TrainSection& t = run_.cfg.train;
  const int64_t step = result.step;
  LoggedStep out;
  const double loss_total = read_loss(signal_pending, out.stop_signal);
  // The skip counters (one small read; identical on every rank, see Session::step).
  out.health = run_.session->health().read();
  const int64_t skipped_now = out.health.skipped - window_.skipped_before;
  progress_.skipped_steps = out.health.skipped;
  out.loss = window_mean(loss_total, skipped_now, run_.layout.world_size);
  out.grad_norm = result.grad_norm.item<double>();
  window_.reset(out.health.skipped);
  progress_.last_loss = out.loss;
  const double tok_s = window_tokens_ / std::max(1e-9, window_clock_.seconds());
  window_clock_.reset();
  window_tokens_ = 0;
  nlohmann::json row = {{"step", step + 1}, {"loss", out.loss}, {"lr", result.lr}, {"grad_norm", out.grad_norm},
                        {"tokens_per_s", tok_s}, {"elapsed_s", progress_.elapsed_s()},
                        {"skipped_steps", skipped_now}, {"tokens_seen", run_.data.tokens_seen()}};
  if (const auto epoch = run_.data.epoch()) row["epoch"] = *epoch;
  if (skipped_now > 0) {
    spdlog::warn("step {}: {} step(s) with a non-finite loss or gradient norm skipped since the last log line "
                 "({} in a row from step {}, {} in total; the run stops as diverged at a log step that sees {} in a row)",
                 step + 1, skipped_now, out.health.consecutive, out.health.streak_start, out.health.skipped,
                 t.max_skipped_steps);
  }
  add_fp8_fields(row, step);
  run::StatusFields status{step + 1, t.steps, out.loss, result.lr, out.grad_norm, tok_s, std::nullopt, std::nullopt, ""};
  add_routing_fields(row, status);
  if (const step::LossScaler* scaler = run_.session->loss_scaler()) row["loss_scale"] = scaler->read_scale();
  write(row);
  const double per_step = progress_.wall.seconds() / static_cast<double>(step + 1 - progress_.start_step);
  status.eta_seconds = (t.steps - step - 1) * per_step;
  status_.update(status);
  return out;
}

// A mixture of experts' routing since the last log line, per MoE layer ("moe": {"h3.mlp": {...}}),
// and the least balanced layer on the console (this rank's tokens; a host read).
void StepLogger::add_routing_fields(nlohmann::json& row, run::StatusFields& status) {
  const auto layers = run_.session->model().read_routing_stats();
  if (layers.empty()) return;
  nlohmann::json moe = nlohmann::json::object();
  double worst = 0.0;
  for (const auto& [name, s] : layers) {
    moe[name] = {{"tokens_min", s.tokens_min}, {"tokens_mean", s.tokens_mean}, {"tokens_max", s.tokens_max},
                 {"tokens_cv", s.tokens_cv}, {"padded_frac", s.padded_frac}, {"dropped", s.dropped},
                 {"aux_loss", s.aux_loss}};
    const double ratio = s.tokens_mean > 0.0 ? s.tokens_max / s.tokens_mean : 0.0;
    if (ratio > worst) {
      worst = ratio;
      status.expert_max_over_mean = ratio;
      status.expert_layer = name.substr(0, name.find('.'));
    }
  }
  row["moe"] = std::move(moe);
}

double StepLogger::window_mean(double loss_total, int64_t skipped, int ranks) const {
  // The mean over the applied steps' micro-batches (skipped steps add nothing to the sum).
  const int64_t applied = window_.micro_batches - skipped * run_.cfg.train.grad_accum_steps;
  return loss_total / static_cast<double>(std::max<int64_t>(applied, 0) * ranks);
}

void StepLogger::show_status(const StepResult& result) {
  if (!run_.layout.is_rank0() || run_.cfg.run.quiet) return;  // nothing to show: no host read
  const TrainSection& t = run_.cfg.train;
  const int64_t step = result.step;
  const int64_t skipped = run_.session->health().read().skipped - window_.skipped_before;
  const double loss = window_mean(window_.loss_sum.item<double>(), skipped, 1);
  const double tok_s = window_tokens_ / std::max(1e-9, window_clock_.seconds());
  const double per_step = progress_.wall.seconds() / static_cast<double>(step + 1 - progress_.start_step);
  status_.update(run::StatusFields{step + 1, t.steps, loss, result.lr, result.grad_norm.item<double>(), tok_s,
                                   (t.steps - step - 1) * per_step, std::nullopt, ""});
}

// The scale spread between ranks (in a job) and the per-slot statistics (fp8.stats).
void StepLogger::add_fp8_fields(nlohmann::json& row, int64_t step) {
  fp8::Scaling* scaling = run_.scaling();
  if (scaling && run_.comm) {
    const double spread = scale_spread_across_ranks(*run_.comm, *scaling);
    row["fp8_scale_spread_across_ranks"] = spread;
    // Unreduced delayed amaxes (fp8.reduce_amax false) may differ; every other shared scale may not.
    const bool expect_identical = !scaling->traits().rank_amaxes || run_.cfg.fp8.reduce_amax;
    progress_.record_scale_spread(spread, step + 1, expect_identical);
  }
  if (scaling && run_.cfg.fp8.stats) {
    row["fp8"] = fp8_stats_json(*scaling);
    progress_.record_fp8_stats(row["fp8"], step + 1);
  }
}

double eval_progress_seconds() {
  const char* v = std::getenv("FP8TRAIN_TEST_EVAL_PROGRESS_S");
  if (v == nullptr || *v == '\0') return 10.0;
  char* end = nullptr;
  const double seconds = std::strtod(v, &end);
  return end != v && *end == '\0' && std::isfinite(seconds) && seconds >= 0.0 ? seconds : 10.0;
}

void StepLogger::begin_eval(int64_t step, int64_t batches, bool final_eval) {
  eval_step_ = step;
  eval_batches_ = batches;
  eval_clock_.reset();
  eval_shown_at_ = 0.0;
  if (final_eval) {
    status_.print(fmt::format("step {}/{} | final evaluation: {} validation batches of {} x {} tokens", step,
                              run_.cfg.train.steps, batches, run_.cfg.train.micro_batch_size, run_.cfg.model.seq_len));
  }
}

void StepLogger::eval_batch(int64_t done) {
  const double now = eval_clock_.seconds();
  if (done == 0 || now - eval_shown_at_ < eval_progress_seconds()) return;
  eval_shown_at_ = now;
  const double remaining = now / static_cast<double>(done) * static_cast<double>(eval_batches_ - done);
  status_.update(fmt::format("step {}/{} | evaluating: {}/{} batches | {} elapsed | ETA {}", eval_step_,
                             run_.cfg.train.steps, done, eval_batches_, run::format_duration(now),
                             run::format_duration(remaining)));
}

void StepLogger::log_eval(int64_t step, double val_loss) {
  write({{"step", step}, {"val_loss", val_loss}, {"elapsed_s", progress_.elapsed_s()}});
  status_.print(fmt::format("step {}/{} | val_loss {:.4f}", step, run_.cfg.train.steps, val_loss));
}

void StepLogger::write(const nlohmann::json& row) {
  try {
    if (metrics_) metrics_->write(row);
    if (tensorboard_) {
      const double peak = static_cast<double>(peak_memory_bytes(run_.device));
      tensorboard_->write_scalars(row.at("step").get<int64_t>(), run::tensorboard_scalars(row, peak));
    }
  } catch (const Error& e) {  // disk full or an I/O error: the run fails (exit 3) with the reason
    if (e.code() != ExitCode::kFailure) throw;
    FP8T_THROW(ExitCode::kTrainingFailed, e.what());
  }
}

// ---- the loop -----------------------------------------------------------------------------

TrainingLoop::TrainingLoop(TrainingJob& run, Progress& progress, StepLogger& logger, Checkpointer& checkpointer)
    : run_(run), progress_(progress), logger_(logger), checkpointer_(checkpointer) {
  // The verdicts on the checkpoints of earlier invocations (a resume truncated the later rows).
  health_.load(run::RunDir::locate(run.cfg.run.out_dir, run.cfg.run.name).metrics_path());
  for (const auto& [step, verdict] : health_.verdicts()) checkpointer_.judged(step, verdict.healthy);
}

void TrainingLoop::run() {
  reset_peak_memory(run_.device);
  progress_.wall.reset();
  progress_.in_loop = true;
  const int64_t steps = run_.cfg.train.steps;
  for (; progress_.step < steps; ++progress_.step) {
    const int64_t step = progress_.step;
    const std::optional<at::Tensor> loss_before = loss_before_checked_step(step);
    const StepResult result = train_step(step);
    if (loss_before) check_checkpoint(result, *loss_before);
    // A signal stops a single process after this step; the ranks of a job agree on it at the
    // next log step (one collective there), so that all of them stop after the same step.
    bool stop_signal = !run_.comm && SignalGuard::received();
    if (result.log_step) {
      const LoggedStep logged = logger_.log(result, SignalGuard::received());
      if (run_.comm) stop_signal = logged.stop_signal;
      check_step(result, logged);
    } else if (step == progress_.start_step) {
      logger_.show_status(result);
    }
    evaluate_if_due(step);
    if (checkpointer_.due(step + 1)) checkpointer_.save(step + 1, progress_, logger_.window(), /*scheduled=*/true);
    if (stop_early(step, stop_signal)) {
      ++progress_.step;
      break;
    }
  }
  progress_.in_loop = false;
}

StepResult TrainingLoop::train_step(int64_t step) {
  const TrainSection& t = run_.cfg.train;
  StepResult result;
  result.step = step;
  result.log_step = logger_.is_log_step(step);
  if (fp8::Scaling* scaling = run_.scaling()) scaling->set_collect_stats(run_.cfg.fp8.stats && result.log_step);
  result.lr = optim::learning_rate(t, step);
  result.grad_norm = run_.session->step([&] { return run_.data.next_train(t.micro_batch_size); }, result.lr,
                                        logger_.loss_sum(), {}, step + 1);
  logger_.count_step();
  return result;
}

std::optional<at::Tensor> TrainingLoop::loss_before_checked_step(int64_t step) {
  if (checkpointer_.history().current_step() != step) return std::nullopt;
  return logger_.loss_sum().clone();
}

void TrainingLoop::check_checkpoint(const StepResult& result, const at::Tensor& loss_before) {
  // Skipped micro-batches add nothing to the sum (StepHealth::unless_skipped); the flag says so.
  const at::Tensor host = at::stack({(logger_.loss_sum() - loss_before).to(at::kDouble),
                                     result.grad_norm.to(at::kDouble),
                                     run_.session->health().found_inf().to(at::kDouble)})
                              .cpu();
  const double* v = host.data_ptr<double>();
  const bool applied = v[2] == 0.0;
  const double loss = applied ? v[0] / static_cast<double>(run_.cfg.train.grad_accum_steps)
                              : std::numeric_limits<double>::quiet_NaN();  // a skipped step adds no loss
  const checkpoint::StepSample next{result.step + 1, loss, v[1], applied};
  const checkpoint::CheckpointVerdict& verdict = health_.judge_checkpoint(next);
  logger_.write({{"step", next.step}, {"checkpoint_check", verdict.to_json()}});
  checkpointer_.judged(verdict.checkpoint, verdict.healthy);  // the way back the rotation keeps
}

namespace {

// "13 steps in a row (8 to 20)" when the streak that diverged is still going, else "at least 5
// steps in a row from step 8".
std::string streak_text(const step::StepHealth::Counts& h, int64_t now, int64_t max_in_a_row) {
  if (h.streak_start == h.diverged_at && h.consecutive > 0) {
    return fmt::format("{} steps in a row ({} to {})", h.consecutive, h.streak_start, now);
  }
  return fmt::format("at least {} steps in a row from step {}", max_in_a_row, h.diverged_at);
}

}  // namespace

// Non-finite steps are skipped on the device (Session::step); the run stops as diverged at the
// first log step that sees train.max_skipped_steps of them in a row (the counters are read on the
// host only there). The weights are those of the step before the streak.
void TrainingLoop::check_step(const StepResult& result, const LoggedStep& logged) {
  const TrainSection& t = run_.cfg.train;
  if (logged.health.diverged_at == 0) {
    health_.observe({result.step + 1, logged.loss, logged.grad_norm, true});
    return;
  }
  progress_.status = "diverged";
  progress_.diverged_at = logged.health.diverged_at;
  FP8T_THROW(ExitCode::kTrainingFailed, "diverged at step ", logged.health.diverged_at, ": ",
             streak_text(logged.health, result.step + 1, t.max_skipped_steps),
             " had a non-finite loss or gradient norm and were skipped (", logged.health.skipped,
             " skipped in total). The run stops at the first log step (train.log_interval ", t.log_interval,
             ") that sees train.max_skipped_steps (", t.max_skipped_steps, ") in a row: here after step ",
             result.step + 1, ". The weights are those of step ", logged.health.diverged_at - 1, ". ",
             way_back(logged.health.diverged_at),
             (run_.cfg.precision == Precision::kFp8 ? " (try fp8.margin, fp8.override_linear_precision or "
                                                      "precision bf16 to locate it; fp8.stats shows saturation)"
                                                    : " (try a lower train.lr or train.grad_clip)"));
}

// The newest checkpoint before the first skipped step whose next step was healthy
// (lib/checkpoint/health.h), why, and the command that continues from it.
std::string TrainingLoop::way_back(int64_t first_skipped) const {
  const checkpoint::CheckpointHistory& history = checkpointer_.history();
  const checkpoint::WayBack back =
      checkpoint::choose_way_back(history.checkpoints(), health_.verdicts(), first_skipped);
  const std::string rule = fmt::format(
      "a checkpoint is healthy when the step trained from its weights had a finite loss and gradient norm, the "
      "loss at most {:g} x and the gradient norm at most {:g} x the medians of the recent healthy steps",
      checkpoint::HealthRule::kLossSpike, checkpoint::HealthRule::kGradNormSpike);
  if (!back.checkpoint) {
    return fmt::format("{} (The run folder holds {}; train.keep_checkpoints keeps more; {}.)", back.explanation,
                       history.describe(), rule);
  }
  const int64_t step = back.checkpoint->first;
  const std::filesystem::path config = back.checkpoint->second.parent_path() / "config.yaml";
  return fmt::format("{} Continue from step {}, after changing what diverged, with: fp8train --config {} "
                     "--resume-from {} (the run folder keeps {}: an older one goes back further; {})",
                     back.explanation, step, config.string(), step, history.describe(), rule);
}

void TrainingLoop::evaluate_if_due(int64_t step) {
  const TrainSection& t = run_.cfg.train;
  if (t.eval_batches == 0) return;  // no validation batches: no evaluation (and no "val nan")
  if (!((t.eval_interval > 0 && (step + 1) % t.eval_interval == 0) || step + 1 == t.steps)) return;
  logger_.begin_eval(step + 1, t.eval_batches, step + 1 == t.steps);
  progress_.record_eval(evaluate(run_, [&](int64_t done) { logger_.eval_batch(done); }));
  logger_.log_eval(step + 1, *progress_.last_val);
}

bool TrainingLoop::stop_early(int64_t step, bool stop_signal) {
  if (step + 1 == run_.cfg.train.steps) return false;
  const int64_t stop_after = run_.options.stop_after;
  const char* status = stop_after > 0 && step + 1 - progress_.start_step >= stop_after ? "stopped"
                       : stop_signal                                                  ? "interrupted"
                                                                                      : nullptr;
  if (!status) return false;
  checkpointer_.save(step + 1, progress_, logger_.window());
  progress_.status = status;
  return true;
}

}  // namespace fp8t::train
