// The subcommands of fp8train. Each adds its CLI11 subcommand (flags + a callback that runs
// it) to the app. Callbacks throw fp8t::Error on failure; only main.cpp maps errors to exit
// codes. `fp8train` with no subcommand trains (cmd_train.cpp).
#pragma once

#include <CLI/CLI.hpp>  // CLI::App

#include <memory>   // std::shared_ptr, std::make_shared
#include <string>   // std::string
#include <utility>  // std::pair

namespace fp8t {
namespace app {

// Training is the default command: its flags live on the top-level app.
void add_train_command(CLI::App& app);
// `fp8train bench`: training-step throughput, bf16 vs fp8 (lib/bench/bench.h).
void add_bench_command(CLI::App& app);
// `fp8train bench-gemm`: FP8 vs BF16 GEMM throughput (needs a CUDA GPU).
void add_bench_gemm_command(CLI::App& app);
// `fp8train report RUN_DIR...`: compare run folders (table, --html page; lib/report/).
void add_report_command(CLI::App& app);
// `fp8train export --run DIR --out FILE`: a run's weights as safetensors (Hugging Face names on request).
void add_export_command(CLI::App& app);
// `fp8train eval --run DIR | --weights FILE`: validation loss and perplexity of saved weights (lib/train/evaluate.h).
void add_eval_command(CLI::App& app);

// A subcommand whose options fill one Args struct; `run` receives it when the subcommand is
// chosen. Returns the subcommand (to add options to) and the struct (their targets).
template <class Args>
std::pair<CLI::App*, std::shared_ptr<Args>> add_args_command(CLI::App& app, const std::string& name,
                                                             const std::string& help, void (*run)(const Args&)) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->callback([args, run] { run(*args); });
  return {cmd, args};
}

}  // namespace app
}  // namespace fp8t
