// The subcommands of fp8train. Each adds its CLI11 subcommand (flags + a callback that runs
// it) to the app. Callbacks throw fp8t::Error on failure; only main.cpp maps errors to exit
// codes. `fp8train` with no subcommand trains (cmd_train.cpp).
#pragma once

#include <CLI/CLI.hpp>  // CLI::App

namespace fp8t {
namespace app {

// Training is the default command: its flags live on the top-level app.
void add_train_command(CLI::App& app);
// `fp8train bench`: training-step throughput, bf16 vs fp8 (lib/train/bench.h).
void add_bench_command(CLI::App& app);
// `fp8train bench-gemm`: FP8 vs BF16 GEMM throughput (needs a CUDA GPU).
void add_bench_gemm_command(CLI::App& app);
// `fp8train report RUN_DIR...`: compare run folders (table, --html page; lib/report/).
void add_report_command(CLI::App& app);
// `fp8train export --run DIR --out FILE`: a run's weights as safetensors (Hugging Face names on request).
void add_export_command(CLI::App& app);

}  // namespace app
}  // namespace fp8t
