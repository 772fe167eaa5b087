// `fp8train bench`: training-step throughput of a config in several precisions (and FP8 recipes)
// side by side (lib/bench/bench.h), as a table on stdout and JSON in a file.
#include <spdlog/spdlog.h>  // spdlog::info

#include <unistd.h>  // access

#include <algorithm>   // std::find_if
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream
#include <iostream>    // std::cout
#include <memory>      // std::make_shared
#include <optional>    // std::optional
#include <sstream>     // std::istringstream
#include <string>      // std::string
#include <vector>      // std::vector

#include "apps/fp8train/commands.h"  // add_bench_command
#include "lib/config/cli_flags.h"    // config::add_config_flags
#include "lib/config/fields.h"       // config::to_string
#include "lib/config/loader.h"       // config::load
#include "lib/dist/launch.h"         // dist::launch_info_from_environment
#include "lib/config/fp8_recipe.h"   // fp8::RecipeKind, fp8::to_string
#include "lib/config/fp8_recipe_fields.h"  // fp8::recipe_registry, fp8::recipe_names
#include "lib/bench/bench.h"         // bench::run_bench
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
  bench::BenchOptions options;
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
    const auto& recipes = fp8::recipe_registry();
    const auto it = std::find_if(recipes.begin(), recipes.end(), [&](const fp8::RecipeTraits& r) { return item == r.name; });
    FP8T_INPUT_CHECK(it != recipes.end(), "--recipes: unknown FP8 recipe '", item,
                     "' (expected a comma-separated list of ", fp8::recipe_names(), ")");
    out.push_back(it->kind);
  }
  FP8T_INPUT_CHECK(!out.empty(), "--recipes is empty (a comma-separated list of ", fp8::recipe_names(), ")");
  return out;
}

// Under --recipes every fp8 row runs its own recipe, so the recipe keys are validated per
// recipe: a key set explicitly must take effect under at least one listed recipe (else the
// error of the first); the rows it does not apply to ignore it, with a warning naming them.
config::LoadedConfig load_for_recipes(const BenchArgs& args, const std::vector<config::Override>& overrides,
                                      const std::vector<fp8::RecipeKind>& recipes) {
  for (const config::Override& o : overrides) {
    FP8T_INPUT_CHECK(o.key != "fp8.recipe", "--recipes and ", o.origin.empty() ? "--set fp8.recipe" : o.origin,
                     " both choose the FP8 recipe: pass one of them");
  }
  std::optional<config::LoadedConfig> first_ok;
  std::optional<Error> first_error;
  std::vector<std::string> ignoring;  // "the current row runs without it: fp8.amax_history_len ..."
  for (fp8::RecipeKind kind : recipes) {
    std::vector<config::Override> with_recipe = overrides;
    with_recipe.push_back(config::Override{"fp8.recipe", fp8::to_string(kind), "--recipes"});
    try {
      config::LoadedConfig loaded = config::load(args.config_path, with_recipe);
      if (!first_ok) first_ok = std::move(loaded);
    } catch (const Error& e) {
      // Only the recipe-key check depends on the recipe: any other error repeats for every recipe.
      if (e.code() != ExitCode::kBadInput) throw;
      if (!first_error) first_error = e;
      ignoring.push_back(std::string("the ") + fp8::to_string(kind) + " row runs without it: " + e.what());
    }
  }
  if (!first_ok) throw *first_error;
  for (const std::string& line : ignoring) spdlog::warn("--recipes: {}", line);
  return *first_ok;
}

void run_bench_command(BenchArgs& args) {
  // The benchmark feeds random tokens itself: the config's data section is not read (a study
  // config's data.order sequential, which synthetic data refuses, included).
  std::vector<config::Override> overrides = args.overrides;
  overrides.push_back(config::Override{"data.source", "synthetic", "bench"});
  overrides.push_back(config::Override{"data.order", "random", "bench"});
  args.options.precisions = parse_precisions(args.precisions);
  args.options.recipes = parse_recipes(args.recipes);
  // Each row sets its own precision; with an fp8 row the fp8 keys are checked as under precision fp8.
  const bool fp8_row = !args.options.recipes.empty() ||
                       std::find(args.options.precisions.begin(), args.options.precisions.end(), Precision::kFp8) !=
                           args.options.precisions.end();
  if (fp8_row) overrides.push_back(config::Override{"precision", "fp8", "--precisions"});
  const config::LoadedConfig loaded = args.options.recipes.empty()
                                          ? config::load(args.config_path, overrides)
                                          : load_for_recipes(args, overrides, args.options.recipes);
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
  const auto results = bench::run_bench(loaded.config, args.options);
  if (!main_rank) return;  // rank 0 reports for the job
  std::cout << bench::format_bench_table(loaded.config, args.options, results) << std::flush;
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path, std::ios::trunc);
    out << bench::bench_to_json(loaded.config, args.options, results).dump(2) << "\n";
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
                  "FP8 scaling recipes to compare (" + fp8::recipe_names() +
                      "): the fp8 row runs once per recipe, with its tokens/s against fp8:delayed and bf16");
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
