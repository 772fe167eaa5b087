// lib/gemm/gemm_bench.cpp: a hidden test case (run only when asked for by its tag,
// `fp8t_tests "[bench-gemm]"`) that runs the GEMM benchmark like `fp8train bench-gemm` and writes
// the JSON to $FP8T_BENCH_JSON when set. scripts/device-test.sh uses it when the fp8train binary
// is unavailable; the reported numbers are checked for sanity, not for speed.
#if defined(FP8T_WITH_CUDA)

#include <cstdio>   // std::printf
#include <cstdlib>  // std::getenv
#include <fstream>  // std::ofstream

#include "lib/gemm/gemm_bench.h"  // run_gemm_bench
#include "tests/kernels/cuda_test_util.h"

TEST_CASE("bench-gemm: default shapes, table and JSON", "[.bench-gemm]") {
  FP8T_REQUIRE_GPU();
  fp8t::gemm::BenchOptions options;
  const auto results = fp8t::gemm::run_gemm_bench(options);
  std::printf("%s", fp8t::gemm::format_bench_table(results).c_str());
  REQUIRE(results.size() == fp8t::gemm::default_bench_shapes().size());
  for (const auto& r : results) {
    CAPTURE(fp8t::gemm::to_string(r.shape));
    REQUIRE(r.fp8_fast > 0);
    REQUIRE(r.fp8_split > 0);
    REQUIRE(r.bf16 > 0);
  }
  if (const char* path = std::getenv("FP8T_BENCH_JSON")) {
    std::ofstream out(path);
    out << fp8t::gemm::bench_to_json(results, options).dump(2) << "\n";
    REQUIRE(out.good());
  }
}

#endif  // FP8T_WITH_CUDA
