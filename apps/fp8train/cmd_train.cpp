// The default command: train (or print / dry-run) an experiment.
#include <spdlog/spdlog.h>  // spdlog::info

#include <fmt/format.h>  // fmt::format

#include <cmath>     // std::isfinite
#include <iostream>  // std::cout
#include <sstream>   // std::ostringstream

#include "apps/fp8train/commands.h"  // add_train_command
#include "lib/config/cli_flags.h"    // config::add_config_flags
#include "lib/config/loader.h"       // config::load
#include "lib/config/parallel_layout.h"  // zero_stage_of_level
#include "lib/config/print.h"        // config::to_yaml, recipe_note, describe_keys
#include "lib/plan/memory_plan.h"    // plan::PlanTarget, plan::print_memory_plan
#include "lib/train/trainer.h"       // train::run_training
#include "lib/util/error.h"          // FP8T_INPUT_CHECK

namespace fp8t {
namespace app {

namespace {

struct TrainArgs {
  std::string config_path;
  std::vector<config::Override> overrides;
  bool print_config = false;
  bool dry_run = false;
  bool resume = false;
  std::string resume_from;
  bool list_keys = false;
  int64_t stop_after = 0;
  // --plan-*: a dry run that plans memory for a cluster (0 / -1: not given).
  int plan_world_size = 0;
  double plan_device_gib = 0;
  int plan_zero = -1;
  bool plans() const { return plan_world_size > 0 || plan_device_gib > 0 || plan_zero >= 0; }
};

void add_plan_flags(CLI::App& app, TrainArgs& args) {
  app.add_option("--plan-world-size", args.plan_world_size,
                 "with --dry-run: plan memory per rank for N data-parallel ranks (default: torchrun's WORLD_SIZE, "
                 "else 1); the model is not built")
      ->check(CLI::Range(1, 1 << 20));  // lib/plan/memory_plan.cpp plans at most 2^20 ranks
  app.add_option("--plan-device-memory", args.plan_device_gib,
                 "with --dry-run: plan for devices of this many GiB each (default: this machine's device)")
      ->check(CLI::Validator(
          [](std::string& v) {
            double gib = 0;
            const bool number = CLI::detail::lexical_cast(v, gib);
            return number && std::isfinite(gib) && gib > 0 ? std::string() : "expected a positive number of GiB, got " + v;
          },
          "GiB"));
  app.add_option("--plan-zero", args.plan_zero,
                 "with --dry-run: plan for dist.zero 0, 1 or 3 instead of the config's")
      ->check(CLI::IsMember({0, 1, 3}));
}

// --dry-run with --plan-*: the memory per rank on the planned cluster, without building anything.
void plan_dry_run(const TrainArgs& args, const config::LoadedConfig& loaded) {
  const dist::LaunchInfo launch = dist::launch_info_from_environment();
  ExperimentConfig cfg = loaded.config;
  if (args.plan_zero >= 0) cfg.dist.zero = zero_stage_of_level(args.plan_zero).value();  // CLI11 checked 0, 1 or 3
  plan::PlanTarget target;
  target.world_size = args.plan_world_size > 0 ? args.plan_world_size : launch.world_size;
  if (args.plan_device_gib > 0) {
    target.device_bytes = args.plan_device_gib * 1024.0 * 1024.0 * 1024.0;
    target.device_name = fmt::format("{:g} GiB", args.plan_device_gib);
  } else {
    const c10::Device device = train::resolve_device(cfg.run.device, launch.local_rank);
    target.device_bytes = plan::device_memory_capacity(device);
    target.device_name = device.str();
  }
  std::ostringstream other_rank;  // under torchrun only rank 0 prints
  plan::print_memory_plan(cfg, target, launch.is_main() ? std::cout : other_rank);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  app.add_option("-c,--config", args->config_path,
                 "experiment YAML file (default: the built-in defaults: configs/default.yaml with precision fp32)")
      ->check(CLI::ExistingFile);
  config::add_config_flags(app, &args->overrides);
  app.add_flag("--print-config", args->print_config, "print the resolved config as YAML and exit");
  app.add_flag("--dry-run", args->dry_run,
               "validate, load the data, build the model and the FP8 plan, print them and exit (writes nothing)");
  app.add_flag("--resume", args->resume, "continue the run folder's checkpoint (run.out_dir/run.name)");
  app.add_option("--resume-from", args->resume_from,
                 "continue from an older checkpoint instead: a step the run folder keeps (train.keep_checkpoints) or "
                 "a checkpoint file; implies --resume");
  app.add_option("--stop-after", args->stop_after,
                 "train at most N steps now, save a checkpoint and exit 0 (continue with --resume)")
      ->check(CLI::NonNegativeNumber);
  add_plan_flags(app, *args);
  app.add_flag("--list-keys", args->list_keys, "list every config key with its type, default and meaning");
  app.footer("\nConfig keys (a key the YAML file leaves out takes its DEFAULT; override any with --set key=value):\n" +
             config::describe_keys());
  app.callback([args, &app] {
    if (app.get_subcommands().size() > 0) return;  // a subcommand ran instead
    if (args->list_keys) {
      std::cout << config::describe_keys();
      return;
    }
    FP8T_INPUT_CHECK(!args->plans() || args->dry_run, "--plan-world-size, --plan-device-memory and --plan-zero "
                     "plan the memory of a dry run: add --dry-run (they train nothing and write nothing)");
    // A plan for a cluster reads no data: data.train_path may be left out.
    const config::LoadedConfig loaded = config::load(args->config_path, args->overrides,
                                                     args->plans() ? config::ConfigUse::kPlan : config::ConfigUse::kTrain);
    if (args->plans()) return plan_dry_run(*args, loaded);
    if (args->print_config) {
      std::cout << config::to_yaml(loaded.config) << config::recipe_note(loaded.config);
      return;
    }
    // Contradictory requests: continuing a run folder and replacing it.
    const bool resume = args->resume || !args->resume_from.empty();
    const char* resume_flag = args->resume_from.empty() ? "--resume" : "--resume-from";
    FP8T_INPUT_CHECK(!(resume && loaded.config.run.overwrite), resume_flag, " and --overwrite (run.overwrite, ",
                     loaded.sources.origin("run.overwrite"), ") contradict each other: ", resume_flag,
                     " continues the run folder, --overwrite replaces it; give one of them");
    train::TrainOptions options;
    options.dry_run = args->dry_run;
    options.resume = resume;
    options.resume_from = args->resume_from;
    options.stop_after = args->stop_after;
    options.launch = dist::launch_info_from_environment();  // torchrun's RANK, WORLD_SIZE, ...
    train::run_training(loaded, options);
  });
}

}  // namespace app
}  // namespace fp8t
