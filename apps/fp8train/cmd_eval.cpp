// `fp8train eval --run DIR | --weights FILE`: the validation loss and perplexity of a run
// folder's checkpoint or of a safetensors file (lib/train/evaluate.h). Writes nothing but
// --json.
#include <spdlog/spdlog.h>  // spdlog::info

#include <filesystem>  // std::filesystem
#include <iostream>    // std::cout
#include <string>      // std::string
#include <vector>      // std::vector

#include "apps/fp8train/commands.h"  // add_eval_command
#include "lib/config/cli_flags.h"    // config::parse_set_argument
#include "lib/config/fp8_recipe_fields.h"  // fp8::recipe_names
#include "lib/run/run_dir.h"         // run::RunDir::is_managed_name, run::write_text_atomic
#include "lib/train/evaluate.h"      // train::evaluate_weights
#include "lib/util/error.h"          // FP8T_INPUT_CHECK

namespace fs = std::filesystem;

namespace fp8t {
namespace app {

namespace {

struct EvalArgs {
  train::EvalRequest request;
  std::string batches;  // N or "all"
  int64_t step = -1;    // -1: not given
  std::string precision, fp8_recipe, device;
  std::vector<std::string> sets;
  std::string json;
  bool overwrite = false;
};

// --json FILE: a file (not a folder) in an existing folder, never a file of the run folder, an
// existing one only with --overwrite. Checked before anything is read.
void check_json_target(const EvalArgs& a) {
  if (a.json.empty() || a.json == "-") return;
  const fs::path out = fs::absolute(a.json);
  std::error_code ec;
  FP8T_INPUT_CHECK(!fs::is_directory(out, ec) && out.has_filename(), "--json ", a.json, " is a folder; name the file");
  FP8T_INPUT_CHECK(fs::is_directory(out.parent_path(), ec), "--json ", a.json, ": the folder ",
                   out.parent_path().string(), " does not exist");
  FP8T_INPUT_CHECK(a.overwrite || !fs::exists(fs::symlink_status(out, ec)), "--json ", a.json,
                   " exists; add --overwrite to replace it, or choose another name");
  if (a.request.run_dir.empty() || !fs::is_directory(a.request.run_dir, ec)) return;
  const fs::path run = fs::absolute(a.request.run_dir);
  FP8T_INPUT_CHECK(!(fs::equivalent(out.parent_path(), run, ec) && run::RunDir::is_managed_name(out.filename().string())),
                   "--json ", a.json, " is a file of the run folder itself; eval writes nothing into the run folder's files");
  for (const fs::directory_entry& entry : fs::directory_iterator(run, ec)) {
    const std::string name = entry.path().filename().string();
    FP8T_INPUT_CHECK(!(run::RunDir::is_managed_name(name) && fs::equivalent(out, entry.path(), ec)), "--json ",
                     a.json, " is the run folder's ", name, " under another name; choose another file");
  }
}

// The config overrides of the dedicated flags, then --set in order.
std::vector<config::Override> overrides_of(const EvalArgs& a) {
  std::vector<config::Override> out;
  if (!a.precision.empty()) out.push_back({"precision", a.precision, "--precision"});
  if (!a.fp8_recipe.empty()) out.push_back({"fp8.recipe", a.fp8_recipe, "--fp8-recipe"});
  if (!a.device.empty()) out.push_back({"run.device", a.device, "--device"});
  for (const std::string& s : a.sets) out.push_back(config::parse_set_argument(s));
  return out;
}

void run_eval(const EvalArgs& a) {
  train::EvalRequest request = a.request;
  if (a.step >= 0) request.step = a.step;
  if (a.batches == "all") {
    request.all = true;
  } else if (!a.batches.empty()) {
    int64_t n = 0;
    FP8T_INPUT_CHECK(CLI::detail::lexical_cast(a.batches, n) && n >= 1, "--batches: expected a number >= 1 or all, got '",
                     a.batches, "'");
    request.batches = n;
  }
  request.overrides = overrides_of(a);
  check_json_target(a);
  const train::EvalResult result = train::evaluate_weights(request);
  const std::string json = result.to_json().dump(2) + "\n";
  if (a.json == "-") {
    std::cout << json;
  } else {
    std::cout << result.summary_line() << "\n";
  }
  std::cout.flush();
  if (!a.json.empty() && a.json != "-") {
    run::write_text_atomic(fs::absolute(a.json), json);
    spdlog::info("wrote {}", a.json);
  }
}

// `fp8train eval --help`.
constexpr const char* kEvalHelp =
    "the validation loss and perplexity of a run folder's checkpoint (--run) or of a safetensors file\n"
    "(--weights), on the run's validation data or on any token files (--data), in any precision and FP8 recipe,\n"
    "on the CPU or a GPU. With the run's own settings it repeats the trainer's final evaluation: the loss is the\n"
    "last val_loss of metrics.jsonl. It writes nothing but --json; the run folder is never touched, and a run\n"
    "folder in use by a training run is read all the same (its newest complete checkpoint).\n"
    "Exit codes: 0 ok, 2 bad input (no run folder, checkpoint or data file; a --step the folder does not keep;\n"
    "token ids beyond the model's vocabulary or a tokenizer that does not match; weights of another shape).";

}  // namespace

void add_eval_command(CLI::App& app) {
  auto [cmd, args] = add_args_command<EvalArgs>(app, "eval", kEvalHelp, run_eval);
  cmd->add_option("--run", args->request.run_dir, "the run folder (<out_dir>/<run_name>): its config.yaml and checkpoint");
  cmd->add_option("--weights", args->request.weights,
                  "a safetensors file instead (`fp8train export`, fp8train's or Hugging Face names)");
  cmd->add_option("--config", args->request.config,
                  "with --weights: the experiment YAML that gives its model shape (default: config.yaml, else the\n"
                  "config.json of `export --names hf`, beside the file)");
  cmd->add_option("--step", args->step, "with --run: the checkpoint of this step (one the folder keeps); default: the newest")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--data", args->request.data,
                  "validation files (paths or globs: llm.c shards, nanoGPT .bin, or text with --source text);\n"
                  "default: the config's validation data (data.val_path, else the tail of data.train_path, or synthetic)");
  cmd->add_option("--source", args->request.source, "tokens | text: how to read --data (default: the config's file source, else tokens)");
  cmd->add_option("--batches", args->batches,
                  "N batches (default: the config's train.eval_batches), or all: every window of the files once");
  cmd->add_option("--batch-size", args->request.batch_size,
                  "windows per batch (default: train.micro_batch_size x the ranks the run trained on)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--precision", args->precision, "fp32 | bf16 | fp16 | fp8 (default: the config's)");
  cmd->add_option("--fp8-recipe", args->fp8_recipe, fp8::recipe_names() + " (default: the config's)");
  cmd->add_option("--device", args->device, "auto | cpu | cuda (default: the config's run.device)");
  cmd->add_option("--set", args->sets, "KEY=VALUE: any other config key, e.g. fp8.margin=1 (repeatable)");
  cmd->add_option("--json", args->json, "also write the result as JSON to this file (- : print it instead of the line)");
  cmd->add_flag("--overwrite", args->overwrite, "replace --json if it exists");
}

}  // namespace app
}  // namespace fp8t
