#include "lib/gemm/gemm_engine.h"

#include <ATen/ATen.h>  // at::empty
#include <cublasLt.h>    // cublasLt*
#include <spdlog/spdlog.h>  // spdlog::debug

#include <functional>     // std::hash
#include <mutex>          // std::mutex, std::lock_guard
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

#include "lib/gemm/cublas_check.h"    // FP8T_CUBLAS_CHECK
#include "lib/gemm/gemm_autotune.h"   // pick_candidate, CandidateTime, kAutotune*
#include "lib/util/status_check.h"    // FP8T_CUDA_CHECK
#include "lib/util/error.h"           // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t {
namespace gemm {

namespace {

cudaDataType_t cuda_type(DataType t) {
  switch (t) {
    case DataType::kE4M3: return CUDA_R_8F_E4M3;
    case DataType::kE5M2: return CUDA_R_8F_E5M2;
    case DataType::kBF16: return CUDA_R_16BF;
    case DataType::kF32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address and the leading dimension in bytes: what
// the kernels of an algorithm may assume (CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_* covers pointer and ld).
uint32_t alignment_of(const void* p, int64_t ld_bytes) {
  const uint64_t bits = reinterpret_cast<uint64_t>(p) | static_cast<uint64_t>(ld_bytes) | 256u;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

struct PlanKey {
  int device;
  int64_t m, n, k;
  DataType a_type, b_type, out_type;
  bool has_bias, fast_accum, trans_a, trans_b;
  uint32_t align_a, align_b, align_out;
  ScaleMode a_scale, b_scale;

  bool operator==(const PlanKey& o) const {
    return device == o.device && m == o.m && n == o.n && k == o.k && a_type == o.a_type &&
           b_type == o.b_type && out_type == o.out_type && has_bias == o.has_bias &&
           fast_accum == o.fast_accum && trans_a == o.trans_a && trans_b == o.trans_b &&
           align_a == o.align_a && align_b == o.align_b && align_out == o.align_out &&
           a_scale == o.a_scale && b_scale == o.b_scale;
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = std::hash<int64_t>()(k.m);
    auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(static_cast<uint64_t>(k.n));
    mix(static_cast<uint64_t>(k.k));
    mix(static_cast<uint64_t>(k.device));
    mix((static_cast<uint64_t>(k.a_type) << 0) | (static_cast<uint64_t>(k.b_type) << 4) |
        (static_cast<uint64_t>(k.out_type) << 8) | (uint64_t{k.has_bias} << 12) |
        (uint64_t{k.fast_accum} << 13) | (uint64_t{k.trans_a} << 14) | (uint64_t{k.trans_b} << 15));
    mix((static_cast<uint64_t>(k.align_a) << 32) | (static_cast<uint64_t>(k.align_b) << 16) | k.align_out);
    mix((static_cast<uint64_t>(k.a_scale) << 8) | static_cast<uint64_t>(k.b_scale));
    return h;
  }
};

// Descriptors + algorithm of one cached problem. Destroyed never (the engine lives forever).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;  // cuBLAS naming
  cublasLtMatmulAlgo_t algo{};
};

cublasLtMatmulMatrixScale_t cublas_scale_mode(ScaleMode m) {
  switch (m) {
    case ScaleMode::kScalar: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case ScaleMode::kVec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ScaleMode::kBlk128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case ScaleMode::kRowVector: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

// Block scale modes (cuBLAS >= 12.9): cuBLAS A is our B, cuBLAS B is our A, so the modes swap too.
void set_scale_modes(cublasLtMatmulDesc_t op, const GemmProblem& p, const std::string& what) {
  const int32_t mode_a = cublas_scale_mode(p.b_scale), mode_b = cublas_scale_mode(p.a_scale);
  FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)),
                    what, " (block scale modes need cuBLAS 12.9 or newer)");
  FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)),
                    what, " (block scale modes need cuBLAS 12.9 or newer)");
}

// The per-call scale pointers (cuBLAS A is our B). Block scale modes need them set before the
// heuristic too: cublasLtMatmulAlgoGetHeuristic returns CUBLAS_STATUS_INVALID_VALUE for a
// VEC128_32F / BLK128x128_32F operand without a scale pointer.
void set_scale_pointers(cublasLtMatmulDesc_t op, const GemmOperands& ops, const std::string& what) {
  const void* scale_a = ops.b_scale_inv;
  const void* scale_b = ops.a_scale_inv;
  FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)),
                    what);
  FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)),
                    what);
}

// The per-call pointers of a cached descriptor (scales, bias); cublasLtMatmul reads them at
// enqueue time.
void bind_pointers(Plan& plan, const GemmProblem& p, const GemmOperands& ops, const std::string& what) {
  if (p.fp8()) set_scale_pointers(plan.op, ops, what);
  if (p.has_bias) {
    const void* bias = ops.bias;
    FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                      what);
  }
}

// Whether a problem's candidates may be timed on its own operands now: its output is about to be
// overwritten anyway (beta = 0) and the stream is not being captured into a CUDA graph.
bool may_time(const GemmProblem& p, cudaStream_t stream) {
  if (p.accumulate) return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FP8T_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "gemm autotune: stream capture status");
  return capture == cudaStreamCaptureStatusNone;
}

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  at::Tensor workspace;  // kWorkspaceBytes, from the caching allocator, held forever
  int cc_major = 0, cc_minor = 0;
  std::string name;
};

// ms per run of one candidate algorithm on the problem's operands (beta = 0: out is overwritten),
// the mean of kAutotuneRepeats runs after one untimed run; -1 when cuBLASLt refuses to run it.
// Synchronizes the stream.
double time_algorithm(DeviceState& dev, Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmOperands& ops,
                      cudaStream_t stream, const std::string& what) {
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&] {
    return cublasLtMatmul(dev.handle, plan.op, &alpha, ops.b, plan.a, ops.a, plan.b, &beta, ops.out, plan.c, ops.out,
                          plan.d, &algo, dev.workspace.data_ptr(), GemmEngine::kWorkspaceBytes, stream);
  };
  if (launch() != CUBLAS_STATUS_SUCCESS) return -1.0;
  cudaEvent_t start = nullptr, stop = nullptr;
  FP8T_CUDA_CHECK(cudaEventCreate(&start), what, ": autotune timing");
  FP8T_CUDA_CHECK(cudaEventCreate(&stop), what, ": autotune timing");
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  FP8T_CUDA_CHECK(cudaEventRecord(start, stream), what, ": autotune timing");
  for (int i = 0; i < kAutotuneRepeats && st == CUBLAS_STATUS_SUCCESS; ++i) st = launch();
  FP8T_CUDA_CHECK(cudaEventRecord(stop, stream), what, ": autotune timing");
  FP8T_CUDA_CHECK(cudaEventSynchronize(stop), what, ": autotune timing");
  float ms = 0.0f;
  FP8T_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), what, ": autotune timing");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return st == CUBLAS_STATUS_SUCCESS ? static_cast<double>(ms) / kAutotuneRepeats : -1.0;
}

}  // namespace

struct GemmEngine::Impl {
  mutable std::mutex mutex;
  bool autotune = false;
  std::vector<TuneRecord> tuned;  // one per tuned plan, in the order they were made
  std::vector<std::unique_ptr<DeviceState>> devices;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;

  DeviceState& device_state(int device) {
    if (device >= static_cast<int>(devices.size())) devices.resize(device + 1);
    if (!devices[device]) {
      auto st = std::make_unique<DeviceState>();
      cudaDeviceProp prop{};
      FP8T_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "gemm engine: device ", device);
      st->cc_major = prop.major;
      st->cc_minor = prop.minor;
      st->name = prop.name;
      FP8T_CUBLAS_CHECK(cublasLtCreate(&st->handle), "gemm engine: cublasLtCreate on device ", device);
      st->workspace = at::empty({static_cast<int64_t>(kWorkspaceBytes)},
                                at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
      devices[device] = std::move(st);
    }
    return *devices[device];
  }

  // The descriptors and layouts of problem p (block scale pointers set: the heuristic needs them).
  static std::unique_ptr<Plan> make_descriptors(const GemmProblem& p, const GemmOperands& ops,
                                                const std::string& what) {
    auto plan = std::make_unique<Plan>();
    FP8T_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    // Row-major out[M,N] = A[M,K]·B[N,K]ᵀ is column-major D[N,M] = op(B)·op(A): cuBLAS "A" is our
    // B, cuBLAS "B" is our A (docs/fp8-formats.md, "cuBLASLt").
    const cublasOperation_t op_a = p.trans_b ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t op_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), what);
    FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), what);
    if (p.fp8()) {
      const int8_t fast = p.fast_accum ? 1 : 0;
      FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)), what);
      if (p.block_scaled()) {
        set_scale_modes(plan->op, p, what);
        set_scale_pointers(plan->op, ops, what);
      }
    }
    if (p.has_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = cuda_type(p.out_type);  // BF16 out: BF16 bias; BF16 GEMM FP32 out: FP32
      FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), what);
      FP8T_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                       sizeof(bias_type)), what);
    }
    // cuBLAS A = our B: stored [N,K] row-major = column-major K x N (ld K), or [K,N] = N x K (ld N).
    if (p.trans_b) {
      FP8T_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_type(p.b_type), p.n, p.k, p.n), what);
    } else {
      FP8T_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_type(p.b_type), p.k, p.n, p.k), what);
    }
    // cuBLAS B = our A: stored [M,K] = column-major K x M (ld K), or [K,M] = M x K (ld M).
    if (p.trans_a) {
      FP8T_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_type(p.a_type), p.m, p.k, p.m), what);
    } else {
      FP8T_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_type(p.a_type), p.k, p.m, p.k), what);
    }
    // C and D: the row-major [M,N] output = column-major N x M (ld N). C is the output itself: read
    // only when accumulating (beta = 1), else unused but it must have a supported type.
    FP8T_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, cuda_type(p.out_type), p.n, p.m, p.n), what);
    FP8T_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, cuda_type(p.out_type), p.n, p.m, p.n), what);
    return plan;
  }

  // The heuristic's algorithms for the plan's problem, best first: one, or up to
  // kAutotuneCandidates when tuning. Throws when there is none.
  static std::vector<cublasLtMatmulHeuristicResult_t> heuristics(const Plan& plan, const PlanKey& key,
                                                                 DeviceState& dev, bool tune, const std::string& what) {
    cublasLtMatmulPreference_t pref = nullptr;
    FP8T_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), what);
    const uint64_t ws = kWorkspaceBytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    // Without these the heuristic assumes 256-byte aligned buffers (docs/fp8-formats.md, "cuBLASLt").
    const uint32_t al_a = key.align_b, al_b = key.align_a, al_cd = key.align_out;  // cuBLAS naming
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_cd, sizeof(al_cd));
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_cd, sizeof(al_cd));
    const int wanted = tune ? kAutotuneCandidates : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> results(wanted);
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(dev.handle, plan.op, plan.a, plan.b, plan.c, plan.d, pref, wanted,
                                          results.data(), &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    FP8T_CUBLAS_CHECK(st, what, " (cuBLASLt heuristic; alignment A/B/out ", key.align_a, "/", key.align_b, "/",
                      key.align_out, " bytes)");
    FP8T_CHECK(found > 0, what, ": cuBLASLt found no algorithm (alignment A/B/out ", key.align_a, "/", key.align_b,
               "/", key.align_out, " bytes, device ", dev.name, ")");
    results.resize(found);
    return results;
  }

  // The cached plan of `key`, made on first use: descriptors and the heuristic's first algorithm,
  // or, when autotuning and the problem may be timed (its output may be overwritten, the stream
  // is not capturing), the fastest of the heuristic's first candidates on these operands.
  Plan& plan_for(const PlanKey& key, const GemmProblem& p, const GemmOperands& ops, DeviceState& dev,
                 cudaStream_t stream) {
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;
    const std::string what = describe(p);
    auto plan = make_descriptors(p, ops, what);
    const bool tune = autotune && may_time(p, stream);
    const std::vector<cublasLtMatmulHeuristicResult_t> found = heuristics(*plan, key, dev, tune, what);
    plan->algo = found[0].algo;
    if (tune) {  // every tuned plan is timed and logged, one candidate too
      bind_pointers(*plan, p, ops, what);
      std::vector<CandidateTime> times;
      for (size_t i = 0; i < found.size(); ++i) {
        times.push_back({static_cast<int>(i), time_algorithm(dev, *plan, found[i].algo, ops, stream, what)});
      }
      const int chosen = pick_candidate(times);
      plan->algo = found[chosen].algo;
      tuned.push_back({what, times[0].ms, times[chosen].ms, chosen, static_cast<int>(times.size())});
      spdlog::debug("gemm autotune: {}: heuristic's first {:.4f} ms, chosen #{} of {} {:.4f} ms", what, times[0].ms,
                    chosen + 1, times.size(), times[chosen].ms);
    }
    Plan& ref = *plan;
    plans.emplace(key, std::move(plan));
    return ref;
  }
};

GemmEngine::GemmEngine() : impl_(std::make_unique<Impl>()) {}
GemmEngine::~GemmEngine() = default;

GemmEngine& GemmEngine::instance() {
  static GemmEngine* engine = new GemmEngine();  // intentionally leaked, see the header
  return *engine;
}

void GemmEngine::set_autotune(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->autotune = on;
}

std::vector<TuneRecord> GemmEngine::tuning_log() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->tuned;
}

size_t GemmEngine::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->plans.size();
}

void GemmEngine::run(const GemmProblem& p, const GemmOperands& ops, cudaStream_t stream) {
  validate(p);
  FP8T_CHECK(p.k > 0, describe(p), ": K must be positive (the tensor API handles K = 0)");
  if (p.m == 0 || p.n == 0) return;
  FP8T_CHECK(ops.a != nullptr && ops.b != nullptr && ops.out != nullptr && (!p.has_bias || ops.bias != nullptr),
             describe(p), ": null operand pointer");

  int device = 0;
  FP8T_CUDA_CHECK(cudaGetDevice(&device), describe(p));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  DeviceState& dev = impl_->device_state(device);
  if (p.fp8()) validate_fp8_device(dev.cc_major, dev.cc_minor, dev.name);

  const int64_t lda_bytes = (p.trans_a ? p.m : p.k) * static_cast<int64_t>(element_size(p.a_type));
  const int64_t ldb_bytes = (p.trans_b ? p.n : p.k) * static_cast<int64_t>(element_size(p.b_type));
  const int64_t ldo_bytes = p.n * static_cast<int64_t>(element_size(p.out_type));
  PlanKey key{device, p.m, p.n, p.k, p.a_type, p.b_type, p.out_type, p.has_bias, p.fp8() && p.fast_accum,
              p.trans_a, p.trans_b, alignment_of(ops.a, lda_bytes), alignment_of(ops.b, ldb_bytes),
              alignment_of(ops.out, ldo_bytes), p.a_scale, p.b_scale};
  if (p.fp8()) {
    FP8T_INPUT_CHECK(key.align_a >= 16 && key.align_b >= 16, describe(p),
                     ": FP8 operands must be 16-byte aligned (a view at an odd offset?); pass a contiguous copy");
  }
  Plan& plan = impl_->plan_for(key, p, ops, dev, stream);
  bind_pointers(plan, p, ops, describe(p));
  // accumulate: C is D (the same layout and pointer), so the product is added to what out holds.
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  FP8T_CUBLAS_CHECK(cublasLtMatmul(dev.handle, plan.op, &alpha, ops.b, plan.a, ops.a, plan.b, &beta, ops.out, plan.c,
                                   ops.out, plan.d, &plan.algo, dev.workspace.data_ptr(), kWorkspaceBytes, stream),
                    describe(p));
}

}  // namespace gemm
}  // namespace fp8t
