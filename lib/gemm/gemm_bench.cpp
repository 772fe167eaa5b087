#include "lib/gemm/gemm_bench.h"

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream, getCurrentDeviceProperties
#include <torch/cuda.h>             // torch::cuda::is_available

#include <algorithm>   // std::sort, std::clamp
#include <cmath>       // std::ceil
#include <cstdio>      // std::snprintf
#include <functional>  // std::function
#include <sstream>     // std::ostringstream

#include "lib/gemm/gemm_engine.h"   // GemmEngine, GemmProblem
#include "lib/util/status_check.h"  // FP8T_CUDA_CHECK
#include "lib/util/error.h"         // FP8T_INPUT_CHECK

namespace fp8t {
namespace gemm {

BenchShape parse_bench_shape(const std::string& text) {
  BenchShape s;
  int64_t* dims[3] = {&s.m, &s.k, &s.n};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? text.find_first_of("xX", pos) : text.size();
    const std::string part = end == std::string::npos ? std::string() : text.substr(pos, end - pos);
    bool ok = !part.empty() && part.size() <= 9 && part.find_first_not_of("0123456789") == std::string::npos;
    if (ok) *dims[i] = std::stoll(part);
    FP8T_INPUT_CHECK(ok && *dims[i] > 0, "--shape '", text,
                     "': expected MxKxN with three positive integers, e.g. 8192x768x3072");
    pos = end == std::string::npos ? text.size() : end + 1;
  }
  return s;
}

std::string to_string(const BenchShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
}

const std::vector<ReferenceNumbers>& reference_numbers() {
  static const std::vector<ReferenceNumbers> refs = {
      {{8192, 8192, 8192}, 735, 1415},  {{16384, 2048, 8192}, 668, 1208}, {{16384, 8192, 2048}, 734, 1370},
      {{16384, 4096, 4096}, 700, 1238}, {{8192, 768, 3072}, 437, 609},    {{8192, 768, 768}, 283, 316},
  };
  return refs;
}

std::vector<BenchShape> default_bench_shapes() {
  std::vector<BenchShape> shapes;
  for (const auto& r : reference_numbers()) shapes.push_back(r.shape);
  return shapes;
}

namespace {

bool same(const BenchShape& a, const BenchShape& b) { return a.m == b.m && a.k == b.k && a.n == b.n; }

// Median milliseconds per call of `call(i)` (i selects the rotating input set).
double median_ms(const std::function<void(int)>& call, int n_sets, int warmup, int repeats, cudaStream_t stream) {
  int idx = 0;
  auto next = [&] {
    call(idx);
    idx = (idx + 1) % n_sets;
  };
  for (int i = 0; i < warmup; ++i) next();
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(repeats) + 2);
  for (auto& e : ev) FP8T_CUDA_CHECK(cudaEventCreate(&e), "bench-gemm: cudaEventCreate");
  // Estimate one call, then time batches of >= ~1 ms so event resolution and launch gaps vanish.
  constexpr int kProbe = 3;
  FP8T_CUDA_CHECK(cudaEventRecord(ev[0], stream), "bench-gemm");
  for (int i = 0; i < kProbe; ++i) next();
  FP8T_CUDA_CHECK(cudaEventRecord(ev[1], stream), "bench-gemm");
  FP8T_CUDA_CHECK(cudaEventSynchronize(ev[1]), "bench-gemm");
  float probe_ms = 0;
  FP8T_CUDA_CHECK(cudaEventElapsedTime(&probe_ms, ev[0], ev[1]), "bench-gemm");
  const double est = std::max(1e-3, static_cast<double>(probe_ms) / kProbe);
  const int inner = std::clamp(static_cast<int>(std::ceil(1.0 / est)), 1, 200);
  for (int r = 0; r < repeats; ++r) {
    FP8T_CUDA_CHECK(cudaEventRecord(ev[2 + 2 * r], stream), "bench-gemm");
    for (int i = 0; i < inner; ++i) next();
    FP8T_CUDA_CHECK(cudaEventRecord(ev[3 + 2 * r], stream), "bench-gemm");
  }
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream), "bench-gemm");
  std::vector<double> ms(repeats);
  for (int r = 0; r < repeats; ++r) {
    float t = 0;
    FP8T_CUDA_CHECK(cudaEventElapsedTime(&t, ev[2 + 2 * r], ev[3 + 2 * r]), "bench-gemm");
    ms[r] = static_cast<double>(t) / inner;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
}

double tflops(const BenchShape& s, double ms) {
  return ms > 0 ? 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) / (ms * 1e9)
                : 0.0;
}

BenchResult bench_one(const BenchShape& s, const BenchOptions& o) {
  BenchResult r;
  r.shape = s;
  for (const auto& ref : reference_numbers()) {
    if (same(ref.shape, s)) {
      r.ref_bf16 = ref.bf16_tflops;
      r.ref_fp8 = ref.fp8_tflops;
    }
  }
  const auto dev = at::TensorOptions().device(at::kCUDA);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  // Enough input sets that their BF16 copies are ~3x the L2, so batches read from HBM.
  const double set_bytes = 2.0 * static_cast<double>(s.m * s.k + s.n * s.k);
  const double l2 = static_cast<double>(at::cuda::getCurrentDeviceProperties()->l2CacheSize);
  r.input_sets = std::clamp(static_cast<int>(std::ceil(3.0 * l2 / set_bytes)), 1, 16);

  std::vector<at::Tensor> a16, b16, a8, b8;
  for (int i = 0; i < r.input_sets; ++i) {
    a16.push_back(at::randn({s.m, s.k}, dev.dtype(at::kBFloat16)));
    b16.push_back(at::randn({s.n, s.k}, dev.dtype(at::kBFloat16)));
    a8.push_back(a16.back().to(at::kFloat8_e4m3fn));
    b8.push_back(b16.back().to(at::kFloat8_e4m3fn));
  }
  const at::Tensor one = at::ones({}, dev.dtype(at::kFloat));
  at::Tensor out = at::empty({s.m, s.n}, dev.dtype(at::kBFloat16));
  GemmEngine& engine = GemmEngine::instance();

  GemmProblem p;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.label = "bench";
  p.out_type = DataType::kBF16;
  auto fp8_call = [&](bool fast) {
    GemmProblem q = p;
    q.fast_accum = fast;
    return [&, q](int i) {
      GemmOperands ops;
      ops.a = a8[i].data_ptr();
      ops.b = b8[i].data_ptr();
      ops.a_scale_inv = one.data_ptr<float>();
      ops.b_scale_inv = one.data_ptr<float>();
      ops.out = out.data_ptr();
      engine.run(q, ops, stream);
    };
  };
  r.fp8_fast = tflops(s, median_ms(fp8_call(true), r.input_sets, o.warmup, o.repeats, stream));
  r.fp8_split = tflops(s, median_ms(fp8_call(false), r.input_sets, o.warmup, o.repeats, stream));

  GemmProblem pb = p;
  pb.a_type = pb.b_type = DataType::kBF16;
  r.bf16 = tflops(s, median_ms(
                         [&](int i) {
                           GemmOperands ops;
                           ops.a = a16[i].data_ptr();
                           ops.b = b16[i].data_ptr();
                           ops.out = out.data_ptr();
                           engine.run(pb, ops, stream);
                         },
                         r.input_sets, o.warmup, o.repeats, stream));
  if (o.torch_reference) {
    r.torch_bf16 = tflops(s, median_ms([&](int i) { at::mm_out(out, a16[i], b16[i].t()); }, r.input_sets, o.warmup,
                                       o.repeats, stream));
    r.torch_fp8 = tflops(s, median_ms(
                                [&](int i) {
                                  (void)at::_scaled_mm(a8[i], b8[i].t(), one, one, {}, {}, at::kBFloat16,
                                                       /*use_fast_accum=*/true);
                                },
                                r.input_sets, o.warmup, o.repeats, stream));
  }
  return r;
}

}  // namespace

std::vector<BenchResult> run_gemm_bench(const BenchOptions& options) {
  FP8T_INPUT_CHECK(torch::cuda::is_available(), "bench-gemm needs a CUDA GPU; none is visible to this process");
  FP8T_INPUT_CHECK(options.repeats >= 1 && options.warmup >= 0, "--repeats must be at least 1");
  const std::vector<BenchShape> shapes = options.shapes.empty() ? default_bench_shapes() : options.shapes;
  for (const auto& s : shapes) {
    GemmProblem p;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.label = "bench";
    validate(p);  // FP8 shape rules, before any allocation
  }
  std::vector<BenchResult> results;
  for (const auto& s : shapes) results.push_back(bench_one(s, options));
  return results;
}

std::string format_bench_table(const std::vector<BenchResult>& results) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof(line), "%-20s %9s %9s %8s %8s %8s | %9s %9s %8s | %8s %8s\n", "GEMM MxKxN",
                "FP8 fast", "FP8 split", "BF16", "fast/BF", "split/BF", "torch FP8", "torch BF", "fast/tFP", "ref FP8",
                "ref BF16");
  os << line;
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  for (const auto& r : results) {
    std::snprintf(line, sizeof(line), "%-20s %9.0f %9.0f %8.0f %8.2f %8.2f | %9.0f %9.0f %8.2f | %8.0f %8.0f\n",
                  to_string(r.shape).c_str(), r.fp8_fast, r.fp8_split, r.bf16, ratio(r.fp8_fast, r.bf16),
                  ratio(r.fp8_split, r.bf16), r.torch_fp8, r.torch_bf16, ratio(r.fp8_fast, r.torch_fp8), r.ref_fp8,
                  r.ref_bf16);
    os << line;
  }
  os << "TFLOP/s (2*M*N*K / median time). FP8: E4M3 x E4M3 -> BF16. fast/split: fast accumulation on/off.\n"
        "torch: at::_scaled_mm (fast accum) and at::mm in this run; ref: PyTorch 2.11 on an H200 (docs/benchmarks.md).\n";
  return os.str();
}

nlohmann::json bench_to_json(const std::vector<BenchResult>& results, const BenchOptions& options) {
  nlohmann::json j;
  j["device"] = torch::cuda::is_available() ? std::string(at::cuda::getCurrentDeviceProperties()->name) : "";
  j["repeats"] = options.repeats;
  j["warmup"] = options.warmup;
  j["unit"] = "TFLOP/s";
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) {
    rows.push_back({{"shape", to_string(r.shape)},
                    {"m", r.shape.m},
                    {"k", r.shape.k},
                    {"n", r.shape.n},
                    {"input_sets", r.input_sets},
                    {"fp8_fast_accum", r.fp8_fast},
                    {"fp8_split_accum", r.fp8_split},
                    {"bf16", r.bf16},
                    {"torch_scaled_mm_fast_accum", r.torch_fp8},
                    {"torch_bf16_mm", r.torch_bf16},
                    {"reference_fp8", r.ref_fp8},
                    {"reference_bf16", r.ref_bf16}});
  }
  j["results"] = rows;
  return j;
}

}  // namespace gemm
}  // namespace fp8t
