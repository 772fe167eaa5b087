// GEMM throughput benchmark (`fp8train bench-gemm`): TFLOP/s of this project's FP8 GEMM with fast
// accumulation on and off, of its own cuBLASLt BF16 GEMM, and, as references measured in the same
// run, of LibTorch's BF16 matmul and FP8 at::_scaled_mm.
//
// Method (METHOD.md of the GPU machine): random inputs (never zeros), warm-up, CUDA events around
// batches of back-to-back GEMMs, the median over many batches, and for shapes whose inputs fit in
// L2 a rotation among several input sets so the timing does not measure the cache.
#pragma once

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstdint>  // int64_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace fp8t {
namespace gemm {

struct BenchShape {
  int64_t m = 0, k = 0, n = 0;  // out[M,N] = A[M,K] · B[N,K]ᵀ
};

// "MxKxN", e.g. "8192x768x3072". Throws fp8t::Error (kBadInput) naming the flag on bad input.
BenchShape parse_bench_shape(const std::string& text);
std::string to_string(const BenchShape& s);

// The shapes of the PyTorch GEMM reference in docs/benchmarks.md, with the numbers measured
// there (BF16 and torch._scaled_mm TFLOP/s on one H200) for comparison.
struct ReferenceNumbers {
  BenchShape shape;
  double bf16_tflops;
  double fp8_tflops;
};
const std::vector<ReferenceNumbers>& reference_numbers();
std::vector<BenchShape> default_bench_shapes();

struct BenchOptions {
  std::vector<BenchShape> shapes;  // empty: default_bench_shapes()
  int repeats = 50;                // timed batches per variant (the median is reported)
  int warmup = 10;                 // untimed GEMMs per variant first
  bool torch_reference = true;     // also time at::mm (BF16) and at::_scaled_mm (FP8)
};

struct BenchResult {
  BenchShape shape;
  int input_sets = 1;           // rotated input sets
  double fp8_fast = 0;          // TFLOP/s: E4M3 x E4M3 -> BF16, fast accumulation
  double fp8_split = 0;         // TFLOP/s: same, fast accumulation off (periodic promotion)
  double bf16 = 0;              // TFLOP/s: this project's cuBLASLt BF16 GEMM
  double torch_bf16 = 0;        // TFLOP/s: at::mm in BF16 (0 when not measured)
  double torch_fp8 = 0;         // TFLOP/s: at::_scaled_mm, fast accumulation (0 when not measured)
  double ref_bf16 = 0;          // docs/benchmarks.md, PyTorch GEMM reference (0 for other shapes)
  double ref_fp8 = 0;
};

// Runs on the current CUDA device. Throws fp8t::Error when no GPU is available.
std::vector<BenchResult> run_gemm_bench(const BenchOptions& options);

std::string format_bench_table(const std::vector<BenchResult>& results);
nlohmann::json bench_to_json(const std::vector<BenchResult>& results, const BenchOptions& options);

}  // namespace gemm
}  // namespace fp8t
