// `fp8train bench-gemm`: FP8 (fast accumulation on/off) vs BF16 GEMM throughput on the GPU.
#include <fstream>   // std::ofstream
#include <iostream>  // std::cout
#include <memory>    // std::make_shared
#include <string>    // std::string
#include <vector>    // std::vector

#include "apps/fp8train/commands.h"  // add_bench_gemm_command
#include "lib/util/error.h"          // FP8T_THROW, FP8T_INPUT_CHECK
#if defined(FP8T_WITH_CUDA)
#include "lib/gemm/gemm_bench.h"  // run_gemm_bench
#endif

namespace fp8t {
namespace app {

namespace {

struct BenchGemmArgs {
  std::vector<std::string> shapes;
  int repeats = 50;
  int warmup = 10;
  std::string json_path = "bench-gemm.json";
  bool no_torch = false;
};

void run_bench_gemm(const BenchGemmArgs& args) {
#if defined(FP8T_WITH_CUDA)
  gemm::BenchOptions options;
  for (const auto& s : args.shapes) options.shapes.push_back(gemm::parse_bench_shape(s));
  options.repeats = args.repeats;
  options.warmup = args.warmup;
  options.torch_reference = !args.no_torch;
  const auto results = gemm::run_gemm_bench(options);
  std::cout << gemm::format_bench_table(results) << std::flush;
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path);
    FP8T_INPUT_CHECK(out.good(), "--json ", args.json_path, ": cannot open for writing");
    out << gemm::bench_to_json(results, options).dump(2) << "\n";
    FP8T_INPUT_CHECK(out.good(), "--json ", args.json_path, ": write failed");
    std::cout << "wrote " << args.json_path << "\n";
  }
#else
  (void)args;
  FP8T_THROW(ExitCode::kBadInput,
             "bench-gemm needs a CUDA GPU and a build with CUDA (this fp8train was built without it: "
             "LibTorch without CUDA or no nvcc found)");
#endif
}

}  // namespace

void add_bench_gemm_command(CLI::App& app) {
  auto args = std::make_shared<BenchGemmArgs>();
  CLI::App* cmd = app.add_subcommand("bench-gemm", "FP8 vs BF16 GEMM throughput (TFLOP/s) on the GPU");
  cmd->add_option("--shape", args->shapes,
                  "GEMM shape MxKxN (out[M,N] = A[M,K]·B[N,K]ᵀ), repeatable; default: the shapes of "
                  "the PyTorch reference in docs/benchmarks.md");
  cmd->add_option("--repeats", args->repeats, "timed batches per variant; the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed GEMMs per variant before timing")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--json", args->json_path, "write the results as JSON here (empty: do not write)")
      ->capture_default_str();
  cmd->add_flag("--no-torch", args->no_torch, "skip the LibTorch reference timings (at::mm, at::_scaled_mm)");
  cmd->callback([args] { run_bench_gemm(*args); });
}

}  // namespace app
}  // namespace fp8t
