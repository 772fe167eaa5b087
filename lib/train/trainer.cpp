#include "lib/train/trainer.h"

#include <spdlog/spdlog.h>  // spdlog::info
#include <torch/torch.h>    // torch::cuda

#include <cmath>  // std::nan

#include "lib/config/print.h"            // config::to_yaml
#include "lib/run/metrics.h"             // write_summary
#include "lib/train/precision_chart.h"   // precision_chart
#include "lib/train/progress.h"          // Progress
#include "lib/run/resume_config.h"       // check_resume_config
#include "lib/run/run_dir.h"             // RunDir
#include "lib/train/run_setup.h"         // Run, setup_run, join_job
#include "lib/train/train_checkpoint.h"  // Checkpointer
#include "lib/train/training_loop.h"     // StepLogger, TrainingLoop
#include "lib/util/error.h"              // FP8T_INPUT_CHECK, FP8T_THROW
#include "lib/util/log.h"                // setup_logging

namespace fp8t {
namespace train {

namespace {

// The run folder (rank 0 creates it and logs into train.log; the other ranks only read it).
RunDir open_run_folder(const Run& run) {
  const RunSection& r = run.cfg.run;
  if (!run.main_rank) return RunDir::locate(r.out_dir, r.name);
  RunDir dir = RunDir::open(r.out_dir, r.name, run.mode);
  setup_logging(r.quiet, dir.log_path().string());
  return dir;
}

// summary.json of a run that failed in the loop ("diverged" for a non-finite loss, "failed" for
// anything else, e.g. a rank died).
void write_failure_summary(const Run& run, const RunDir& dir, Progress& progress, const Error& e) {
  if (e.code() != ExitCode::kTrainingFailed || !run.main_rank) return;
  if (progress.status == "completed") progress.status = "failed";
  try {
    write_summary(dir.summary_path(), progress.failure_summary(e.what()));
  } catch (const Error& write_error) {  // e.g. the disk is still full: the error itself matters more
    spdlog::error("{}", write_error.what());
  }
}

// summary.json and the last log line; an interrupted run then exits with kInterrupted.
nlohmann::json finish(const Run& run, const RunDir& dir, const Progress& progress) {
  nlohmann::json summary = progress.summary(run);
  summary["precision_chart"] = precision_chart(*run.session, run.world_size).to_json();
  if (run.main_rank) {
    write_summary(dir.summary_path(), summary);
    spdlog::info("{}: {} steps, final loss {:.4f}, val {:.4f}, {:.0f} tokens/s, {:.1f}s -> {}", progress.status,
                 progress.step, progress.last_loss, progress.last_val.value_or(std::nan("")),
                 summary["tokens_per_s"].get<double>(), progress.wall.seconds(), dir.path().string());
  }
  if (progress.status == "interrupted") {
    FP8T_THROW(ExitCode::kInterrupted, "interrupted; checkpoint saved in ", dir.path().string(),
               " (continue with --resume)");
  }
  return summary;
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
  Run run = setup_run(loaded, options);
  if (options.dry_run) return dry_run_plan(run);
  join_job(run);

  SignalGuard signals;  // before anything is written: a signal from now on stops after a checkpoint
  const RunDir dir = open_run_folder(run);
  Progress progress;
  Checkpointer checkpointer(run, dir);
  if (options.resume) {
    const std::vector<ConfigChange> changes = check_resume_config(dir, run.cfg);  // every rank
    checkpointer.resume(progress);
    if (run.main_rank) record_resume_config(dir, changes, progress.start_step);  // before config.yaml is replaced
  }
  if (run.main_rank) dir.write_text_atomic("config.yaml", config::to_yaml(run.cfg));
  StepLogger logger(run, dir, progress);
  TrainingLoop loop(run, progress, logger, checkpointer);
  try {
    loop.run();
  } catch (const Error& e) {
    logger.finish();
    write_failure_summary(run, dir, progress, e);
    throw;
  }
  logger.finish();
  return finish(run, dir, progress);
}

}  // namespace train
}  // namespace fp8t
