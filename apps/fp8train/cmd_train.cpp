// The default command: train (or print / dry-run) an experiment.
#include <spdlog/spdlog.h>  // spdlog::info

#include <iostream>  // std::cout

#include "apps/fp8train/commands.h"  // add_train_command
#include "lib/config/cli_flags.h"    // config::add_config_flags
#include "lib/config/loader.h"       // config::load
#include "lib/config/print.h"        // config::to_yaml, recipe_note, describe_keys
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
};

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  app.add_option("-c,--config", args->config_path,
                 "experiment YAML file (default: the built-in defaults, same as configs/default.yaml)")
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
  app.add_flag("--list-keys", args->list_keys, "list every config key with its type, default and meaning");
  app.footer("\nConfig keys (override any with --set key=value):\n" + config::describe_keys());
  app.callback([args, &app] {
    if (app.get_subcommands().size() > 0) return;  // a subcommand ran instead
    if (args->list_keys) {
      std::cout << config::describe_keys();
      return;
    }
    const config::LoadedConfig loaded = config::load(args->config_path, args->overrides);
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
