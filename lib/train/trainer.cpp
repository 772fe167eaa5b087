#include "lib/train/trainer.h"

#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::info
#include <torch/torch.h>    // torch::cuda

#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include "lib/config/print.h"            // config::to_yaml
#include "lib/run/console.h"             // print_result
#include "lib/run/metrics.h"             // write_summary
#include "lib/train/precision_chart.h"   // precision_chart
#include "lib/train/progress.h"          // Progress, fp8_summary_line
#include "lib/run/resume_config.h"       // check_resume_config
#include "lib/run/run_dir.h"             // RunDir
#include "lib/train/run_setup.h"         // TrainingJob, setup_job, join_job
#include "lib/train/train_checkpoint.h"  // Checkpointer
#include "lib/train/training_loop.h"     // StepLogger, TrainingLoop
#include "lib/util/error.h"              // FP8T_INPUT_CHECK, FP8T_THROW
#include "lib/util/log.h"                // setup_logging

namespace fp8t {
namespace train {

namespace {

// The run folder (rank 0 creates it and logs into train.log; the other ranks only read it).
run::RunDir open_run_folder(const TrainingJob& run) {
  const RunSection& r = run.cfg.run;
  if (!run.layout.is_rank0()) return run::RunDir::locate(r.out_dir, r.name);
  run::RunDir dir = run::RunDir::open(r.out_dir, r.name, run.mode);
  setup_logging(r.quiet, dir.log_path().string());
  return dir;
}

// A write into the run folder that fails (disk full, an I/O error) ends the run: exit 3, like a
// failed checkpoint or metrics write.
template <class Write>
void write_or_fail(Write&& write) {
  try {
    write();
  } catch (const Error& e) {
    if (e.code() != ExitCode::kFailure) throw;
    FP8T_THROW(ExitCode::kTrainingFailed, e.what());
  }
}

// summary.json of a run that failed ("diverged" for a non-finite loss, "failed" for anything
// else, e.g. a rank died or the disk is full).
void write_failure_summary(const TrainingJob& run, const run::RunDir& dir, Progress& progress, const Error& e) {
  if (e.code() != ExitCode::kTrainingFailed || !run.layout.is_rank0()) return;
  if (progress.status == "completed") progress.status = "failed";
  try {
    run::write_summary(dir.summary_path(), progress.failure_summary(e.what()));
  } catch (const Error& write_error) {  // e.g. the disk is still full: the error itself matters more
    spdlog::error("{}", write_error.what());
  }
}

// summary.json, or exit 3 with why it could not be written and how to write it later.
void write_final_summary(const run::RunDir& dir, const nlohmann::json& summary) {
  try {
    run::write_summary(dir.summary_path(), summary);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kFailure) throw;
    FP8T_THROW(ExitCode::kTrainingFailed, e.what(), "; the run trained ", summary.value("steps", 0),
               " steps and its checkpoint is intact: free space and run `fp8train --config ",
               dir.config_path().string(), " --resume` to write ", dir.summary_path().string());
  }
}

// "val 0.8123", or "no evaluation" when none ran.
std::string val_text(const Progress& progress) {
  return progress.last_val ? fmt::format("val {:.4f}", *progress.last_val) : "no evaluation";
}

// summary.json and the last log line; an interrupted run then exits with kInterrupted.
nlohmann::json finish(const TrainingJob& run, const run::RunDir& dir, const Progress& progress) {
  nlohmann::json summary = progress.summary(run);
  summary["precision_chart"] = precision_chart(*run.session, run.layout.world_size).to_json();
  if (run.layout.is_rank0()) {
    write_final_summary(dir, summary);
    const std::string fp8 = fp8_summary_line(summary.value("fp8", nlohmann::json()));
    if (!fp8.empty()) spdlog::info("{}", fp8);
    run::print_result(fmt::format("{}: {} steps, final loss {:.4f}, {}, {:.0f} tokens/s, {:.1f}s -> {}", progress.status,
                                  progress.step, progress.last_loss, val_text(progress),
                                  summary["tokens_per_s"].get<double>(), progress.wall.seconds(), dir.path().string()),
                      run.cfg.run.quiet);
  }
  if (progress.status == "interrupted") {
    FP8T_THROW(ExitCode::kInterrupted, "interrupted; checkpoint saved in ", dir.path().string(),
               " (continue with --resume)");
  }
  return summary;
}

// --resume of a run whose every step is done but whose summary.json was never written: the
// summary its final checkpoint recorded.
nlohmann::json finish_from_checkpoint(const TrainingJob& run, const run::RunDir& dir, nlohmann::json summary) {
  summary["precision_chart"] = precision_chart(*run.session, run.layout.world_size).to_json();
  summary["written_on_resume"] = true;
  if (run.layout.is_rank0()) {
    write_final_summary(dir, summary);
    run::print_result(fmt::format("the run had trained all {} steps; wrote {} from its final checkpoint",
                                  summary.value("steps", 0), dir.summary_path().string()),
                      run.cfg.run.quiet);
  }
  return summary;
}

// Resume (every rank reads the checkpoint). False: the run has no step left (its summary was
// written now).
bool resume(const TrainingJob& run, const run::RunDir& dir, Checkpointer& checkpointer, Progress& progress) {
  const std::vector<run::ConfigChange> changes = run::check_resume_config(dir, run.cfg);  // every rank
  const bool steps_left = checkpointer.resume(progress);
  if (run.layout.is_rank0()) write_or_fail([&] { run::record_resume_config(dir, changes, progress.start_step); });
  return steps_left;
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

// The phases in order: setup (checks and construction; nothing written), the data-parallel job,
// the run folder, resume, the loop (step, log/eval, checkpoint), finish.
nlohmann::json run_training(const config::LoadedConfig& loaded, const TrainOptions& options) {
  // Other ranks log warnings and errors only, to the console.
  setup_logging(loaded.config.run.quiet || !options.launch.is_main(), "");
  TrainingJob run = setup_job(loaded, options);
  if (options.dry_run) return dry_run_plan(run);
  join_job(run);

  SignalGuard signals;  // before anything is written: a signal from now on stops after a checkpoint
  const run::RunDir dir = open_run_folder(run);
  Progress progress;
  Checkpointer checkpointer(run, dir);
  try {
    if (options.resume && !resume(run, dir, checkpointer, progress)) {
      return finish_from_checkpoint(run, dir, checkpointer.final_summary());
    }
    // config.yaml after the resume's record of the one it replaces.
    if (run.layout.is_rank0()) write_or_fail([&] { dir.write_text_atomic("config.yaml", config::to_yaml(run.cfg)); });
    std::optional<StepLogger> logger;
    write_or_fail([&] { logger.emplace(run, dir, progress); });
    TrainingLoop loop(run, progress, *logger, checkpointer);
    try {
      loop.run();
    } catch (...) {
      logger->finish();
      throw;
    }
    logger->finish();
  } catch (const Error& e) {
    write_failure_summary(run, dir, progress, e);
    throw;
  }
  return finish(run, dir, progress);
}

}  // namespace train
}  // namespace fp8t
