// `fp8train bench`: training-step throughput of a config in several precisions (and FP8 recipes)
// side by side (lib/train/bench.h), as a table on stdout and JSON in a file.
#include <spdlog/spdlog.h>  // spdlog::info

#include <unistd.h>  // access

#include <algorithm>  // std::find_if
#include <filesystem>  // std::filesystem
#include <fstream>   // std::ofstream
#include <iostream>  // std::cout
#include <memory>    // std::make_shared
#include <sstream>   // std::istringstream
#include <string>    // std::string
#include <vector>    // std::vector

#include "apps/fp8train/commands.h"  // add_bench_command
#include "lib/config/cli_flags.h"    // config::add_config_flags
#include "lib/config/fields.h"       // config::to_string
#include "lib/config/loader.h"       // config::load
#include "lib/dist/launch.h"         // dist::launch_info_from_environment
#include "lib/train/bench.h"         // train::run_bench
#include "lib/util/error.h"          // FP8T_INPUT_CHECK
#include "lib/util/log.h"            // setup_logging

namespace fp8t {
namespace app {

namespace {

struct BenchArgs {
  std::string config_path;
  std::vector<config::Override> overrides;
  std::string precisions = "bf16,fp8";
  std::string recipes;  // "" = the config's fp8.recipe
  train::BenchOptions options;
  std::string json_path = "bench.json";
};

std::vector<Precision> parse_precisions(const std::string& list) {
  std::vector<Precision> out;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const Precision all[] = {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8};
    const auto it = std::find_if(std::begin(all), std::end(all),
                                 [&](Precision p) { return item == config::to_string(p); });
    FP8T_INPUT_CHECK(it != std::end(all), "--precisions: unknown precision '", item,
                     "' (expected a comma-separated list of fp32, bf16, fp16, fp8)");
    out.push_back(*it);
  }
  FP8T_INPUT_CHECK(!out.empty(), "--precisions is empty (e.g. --precisions bf16,fp8)");
  return out;
}

std::vector<fp8::RecipeKind> parse_recipes(const std::string& list) {
  std::vector<fp8::RecipeKind> out;
  if (list.empty()) return out;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto& names = fp8::kRecipeKindNames;
    const auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return item == n.second; });
    FP8T_INPUT_CHECK(it != names.end(), "--recipes: unknown FP8 recipe '", item,
                     "' (expected a comma-separated list of delayed, current, block)");
    out.push_back(it->first);
  }
  FP8T_INPUT_CHECK(!out.empty(), "--recipes is empty (e.g. --recipes delayed,current,block)");
  return out;
}

void run_bench_command(BenchArgs& args) {
  // The benchmark feeds random tokens itself: the config's data section is not read.
  std::vector<config::Override> overrides = args.overrides;
  overrides.push_back(config::Override{"data.source", "synthetic", "bench"});
  const config::LoadedConfig loaded = config::load(args.config_path, overrides);
  args.options.precisions = parse_precisions(args.precisions);
  args.options.recipes = parse_recipes(args.recipes);
  args.options.launch = dist::launch_info_from_environment();  // torchrun: a data-parallel benchmark
  const bool main_rank = args.options.launch.is_main();
  setup_logging(loaded.config.run.quiet || !main_rank, "");
  if (!args.json_path.empty() && main_rank) {
    // Fail before the (long) measurement, not after it, and without creating the file.
    const std::filesystem::path json(args.json_path);
    const std::filesystem::path dir = json.has_parent_path() ? json.parent_path() : ".";
    FP8T_INPUT_CHECK(std::filesystem::is_directory(dir) && ::access(dir.c_str(), W_OK) == 0, "--json ",
                     args.json_path, ": the folder ", dir.string(), " does not exist or is not writable");
  }
  const auto results = train::run_bench(loaded.config, args.options);
  if (!main_rank) return;  // rank 0 reports for the job
  std::cout << train::format_bench_table(loaded.config, args.options, results) << std::flush;
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path, std::ios::trunc);
    out << train::bench_to_json(loaded.config, args.options, results).dump(2) << "\n";
    FP8T_INPUT_CHECK(out.good(), "--json ", args.json_path, ": write failed");
    spdlog::info("wrote {}", args.json_path);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "training throughput of a config in several precisions side by side (synthetic tokens; table + JSON)");
  cmd->add_option("-c,--config", args->config_path, "experiment YAML file (model and batch; data is not read)")
      ->check(CLI::ExistingFile);
  config::add_config_flags(*cmd, &args->overrides);
  cmd->add_option("--precisions", args->precisions, "comma-separated precisions to compare, in order (fp32, bf16, fp16, fp8)")
      ->capture_default_str();
  cmd->add_option("--recipes", args->recipes,
                  "FP8 scaling recipes to compare (delayed, current, block): the fp8 row runs once per recipe, "
                  "with its tokens/s against fp8:delayed and bf16");
  cmd->add_option("--bench-steps", args->options.steps, "timed optimizer steps per precision (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--bench-warmup", args->options.warmup, "untimed optimizer steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--micro-batches", args->options.micro_batches,
                  "micro-batches per optimizer step (replaces train.grad_accum_steps)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--breakdown", args->options.breakdown,
               "also time each phase of a step (forward, loss, backward, ..., optimizer), synchronizing after each");
  cmd->add_option("--profile", args->options.profile_steps,
                  "also profile this many steps and list the time of every GPU kernel per step (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--json", args->json_path, "write the results as JSON here (empty: do not write)")
      ->capture_default_str();
  cmd->callback([args] { run_bench_command(*args); });
}

}  // namespace app
}  // namespace fp8t
