// Softmax cross-entropy of the GPT loss over logits[rows, vocab]: forward (per-row loss and
// log-sum-exp) and backward (softmax - onehot, scaled), without the FP32 copy, the saved
// log_softmax and the zero-filled gradient of the ATen composition (lib/ops/cross_entropy.h).
//
// A row is handled by a group of threads: one warp (8 rows per block) for short rows, a whole
// block of 256 or 512 threads for long ones. The forward reads each row once: every thread keeps a
// running max m and a sum s of exp(x - m), rescaling s when m grows (the "online softmax"), and the
// group combines the (m, s) pairs in a fixed order (deterministic). The backward reads each row
// once more and writes the gradient element by element from the saved log-sum-exp. A third
// kernel multiplies the LM head's kept gradients by the loss's incoming gradient unless it is 1.
//
// Loads (and the backward's stores) are 16 bytes wide: a row is split into a scalar head up to the
// first 16-byte boundary, 16-byte vectors, and a scalar tail, so any vocab size and any element-
// aligned base is vectorised (rows of an odd vocab start at different offsets within 16 bytes).
// The backward falls back to scalar accesses when logits and dlogits sit at different offsets
// within 16 bytes (then one can be vectorised but not both).
//
// Numerics: FP32 throughout with expf/logf (not the __expf/__logf intrinsics), so the results
// agree with ATen's log_softmax + nll_loss to about 1e-6 relative. The loss is formed as
// log(s) - (x[t] - m), the order ATen uses (log_softmax = (x - max) - log(sum)).
#include <math_constants.h>  // CUDART_INF_F, CUDART_NAN_F

#include <algorithm>  // std::min

#include "dispatch.cuh"      // dispatch_dtype
#include "fp8_device.cuh"    // load_elem, store_elem, round_to_dtype
#include "fp8t_kernels.h"    // the C API
#include "launch.cuh"        // sm_count
#include "packed.cuh"        // Packed128, elem_bytes
#include "precondition.cuh"  // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;

constexpr int kBlockThreads = 256;  // block size of the warp-per-row and 256-thread policies
constexpr int kVecBytes = 16;

template <int kDtype>
struct Elem {
  static constexpr int kBytes = elem_bytes<kDtype>();
  static constexpr int kPerVec = Packed128::elems<kDtype>();  // elements per 16-byte vector
};

// A row in three parts: `head` scalars up to the first 16-byte boundary, `n_vec` 16-byte vectors,
// then scalars up to the end. Without vectorisation the whole row is head.
struct RowSplit {
  int64_t head;
  int64_t n_vec;
};

template <int kDtype>
__device__ __forceinline__ RowSplit split_row(const void* row, int64_t vocab, bool vectorize) {
  if (!vectorize) return {vocab, 0};
  const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) & (kVecBytes - 1));
  int64_t head = ((kVecBytes - misalign) & (kVecBytes - 1)) / Elem<kDtype>::kBytes;
  if (head > vocab) head = vocab;
  return {head, (vocab - head) / Elem<kDtype>::kPerVec};
}

// (max, sum of exp(x - max)) of a set of values; the empty set is (-inf, 0). m is never NaN (fmaxf
// skips NaN), a NaN input reaches s through exp(NaN - m) and stays there.
struct MaxSum {
  float m;
  float s;
};

// s, a sum of exp(x - m_old), re-expressed as a sum of exp(x - m_new), m_new >= m_old. Equal maxima
// (also both -inf, where exp(-inf - -inf) would be NaN) need no factor.
__device__ __forceinline__ float rescale(float s, float m_old, float m_new) {
  return m_old == m_new ? s : s * expf(m_old - m_new);
}

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  return {m, rescale(a.s, a.m, m) + rescale(b.s, b.m, m)};
}

// Adds n values: one rescale for the group, then one exp per value. While the maximum is still
// -inf every value seen is -inf and adds exp(-inf) = 0 (skipped: -inf - -inf is NaN).
template <int kN>
__device__ __forceinline__ void accumulate(MaxSum& acc, const float (&v)[kN]) {
  float vmax = v[0];
#pragma unroll
  for (int i = 1; i < kN; ++i) vmax = fmaxf(vmax, v[i]);
  const float m = fmaxf(acc.m, vmax);
  float s = rescale(acc.s, acc.m, m);
  if (m != -CUDART_INF_F) {
#pragma unroll
    for (int i = 0; i < kN; ++i) s += expf(v[i] - m);
  }
  acc = {m, s};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum a) {
  // combine() is symmetric (fmaxf and + commute), so every lane ends with the same bits.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum b = {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
    a = combine(a, b);
  }
  return a;
}

// (m, s) of the whole row, valid in lane 0 of the row group. kRowThreads == 32: the warp alone, no
// block synchronisation (so warps past the last row may have returned). Otherwise the row is the
// whole block: every thread must call.
template <int kRowThreads>
__device__ __forceinline__ MaxSum row_combine(MaxSum a) {
  a = warp_combine(a);
  if constexpr (kRowThreads == 32) {
    return a;
  } else {
    __shared__ float warp_m[32], warp_s[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) {
      warp_m[warp] = a.m;
      warp_s[warp] = a.s;
    }
    __syncthreads();
    if (warp == 0) {
      constexpr int kWarps = kRowThreads / 32;
      MaxSum b = lane < kWarps ? MaxSum{warp_m[lane], warp_s[lane]} : MaxSum{-CUDART_INF_F, 0.0f};
      a = warp_combine(b);
    }
    return a;
  }
}

template <int kRowThreads>
struct RowGroup {
  static constexpr int kThreads = kRowThreads > kBlockThreads ? kRowThreads : kBlockThreads;
  static constexpr int kRowsPerBlock = kThreads / kRowThreads;
  static_assert(kRowThreads == 32 || kRowsPerBlock == 1, "a row is one warp or one whole block");
};

template <int kDtype, int kRowThreads>
__global__ void __launch_bounds__(RowGroup<kRowThreads>::kThreads)
    cross_entropy_forward_kernel(const void* __restrict__ logits, const int64_t* __restrict__ targets,
                                 int64_t rows, int64_t vocab, float* __restrict__ loss,
                                 float* __restrict__ lse) {
  constexpr int kPer = Elem<kDtype>::kPerVec;
  const int lane = static_cast<int>(threadIdx.x % kRowThreads);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * RowGroup<kRowThreads>::kRowsPerBlock +
                      threadIdx.x / kRowThreads;
  if (row >= rows) return;  // only whole warps of the warp-per-row policy get here
  const char* row_ptr = static_cast<const char*>(logits) + row * vocab * Elem<kDtype>::kBytes;
  const RowSplit part = split_row<kDtype>(row_ptr, vocab, true);
  const int64_t body_end = part.head + part.n_vec * kPer;

  MaxSum acc = {-CUDART_INF_F, 0.0f};
  // Head and tail: fewer than kPer elements each.
  for (int64_t c = lane; c < part.head; c += kRowThreads) {
    const float v[1] = {load_elem<kDtype>(row_ptr, c)};
    accumulate(acc, v);
  }
  for (int64_t c = body_end + lane; c < vocab; c += kRowThreads) {
    const float v[1] = {load_elem<kDtype>(row_ptr, c)};
    accumulate(acc, v);
  }
  // Body: two independent 16-byte loads in flight per thread and iteration.
  const char* body = row_ptr + part.head * Elem<kDtype>::kBytes;
  int64_t i = lane;
  for (; i + kRowThreads < part.n_vec; i += 2 * kRowThreads) {
    float a[kPer], b[kPer];
    // Plain loads (not __ldg): the backward may write the same addresses (in place).
    Packed128::load(body + i * kVecBytes).unpack<kDtype>(a);
    Packed128::load(body + (i + kRowThreads) * kVecBytes).unpack<kDtype>(b);
    accumulate(acc, a);
    accumulate(acc, b);
  }
  if (i < part.n_vec) {
    float a[kPer];
    Packed128::load(body + i * kVecBytes).unpack<kDtype>(a);
    accumulate(acc, a);
  }

  acc = row_combine<kRowThreads>(acc);
  if (lane == 0) {
    const float log_s = logf(acc.s);
    lse[row] = acc.m + log_s;
    const int64_t t = targets[row];
    loss[row] = (t >= 0 && t < vocab) ? log_s - (load_elem<kDtype>(row_ptr, t) - acc.m) : CUDART_NAN_F;
  }
}

// No __restrict__ on logits / dlogits: they may be the same buffer. Every element is read and then
// written by the same thread.
template <int kDtype, int kRowThreads>
__global__ void __launch_bounds__(RowGroup<kRowThreads>::kThreads)
    cross_entropy_backward_kernel(const void* logits, const int64_t* __restrict__ targets,
                                  const float* __restrict__ lse, const float* __restrict__ grad_scale,
                                  int64_t rows, int64_t vocab, void* dlogits, bool vectorize) {
  constexpr int kPer = Elem<kDtype>::kPerVec;
  const int lane = static_cast<int>(threadIdx.x % kRowThreads);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * RowGroup<kRowThreads>::kRowsPerBlock +
                      threadIdx.x / kRowThreads;
  if (row >= rows) return;
  const int64_t offset = row * vocab * Elem<kDtype>::kBytes;
  const char* in = static_cast<const char*>(logits) + offset;
  char* out = static_cast<char*>(dlogits) + offset;
  const int64_t t = targets[row];
  const float g = (t >= 0 && t < vocab) ? *grad_scale : CUDART_NAN_F;  // NaN row for a bad target
  const float l = lse[row];
  auto grad = [&](float x, int64_t c) { return (expf(x - l) - (c == t ? 1.0f : 0.0f)) * g; };

  const RowSplit part = split_row<kDtype>(in, vocab, vectorize);
  const int64_t body_end = part.head + part.n_vec * kPer;
  for (int64_t c = lane; c < part.head; c += kRowThreads) {
    store_elem<kDtype>(out, c, grad(load_elem<kDtype>(in, c), c));
  }
  for (int64_t c = body_end + lane; c < vocab; c += kRowThreads) {
    store_elem<kDtype>(out, c, grad(load_elem<kDtype>(in, c), c));
  }
  const int64_t body_bytes = part.head * Elem<kDtype>::kBytes;
  for (int64_t i = lane; i < part.n_vec; i += kRowThreads) {
    float v[kPer];
    Packed128::load(in + body_bytes + i * kVecBytes).unpack<kDtype>(v);
    const int64_t c0 = part.head + i * kPer;
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = grad(v[k], c0 + k);
    Packed128::pack<kDtype>(v).store(out + body_bytes + i * kVecBytes);
  }
}

// Threads per row: a warp while a lane has at most 8 vectors to read, then a 256-thread block,
// then 512 threads (a 50304-wide bf16 row: about 12 vectors per thread).
int row_threads(int64_t vocab, int dtype) {
  const int64_t n_vec = vocab * (dtype == FP8T_DTYPE_F32 ? 4 : 2) / kVecBytes;
  if (n_vec <= 32 * 8) return 32;
  if (n_vec <= 256 * 8) return 256;
  return 512;
}

dim3 grid_for(int row_threads, int64_t rows) {
  const int64_t rows_per_block = row_threads == 32 ? kBlockThreads / 32 : 1;
  return dim3(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
}

template <int kDtype>
void launch_forward(int64_t rows, int64_t vocab, cudaStream_t stream, const void* logits,
                    const int64_t* targets, float* loss, float* lse) {
  const int rt = row_threads(vocab, kDtype);
  const dim3 grid = grid_for(rt, rows);
#define FP8T_CE_FWD(RT)                                                                      \
  cross_entropy_forward_kernel<kDtype, RT><<<grid, RowGroup<RT>::kThreads, 0, stream>>>( \
      logits, targets, rows, vocab, loss, lse)
  switch (rt) {
    case 32: FP8T_CE_FWD(32); break;
    case 256: FP8T_CE_FWD(256); break;
    default: FP8T_CE_FWD(512); break;
  }
#undef FP8T_CE_FWD
}

template <int kDtype>
void launch_backward(int64_t rows, int64_t vocab, cudaStream_t stream, const void* logits,
                     const int64_t* targets, const float* lse, const float* grad_scale, void* dlogits,
                     bool vectorize) {
  const int rt = row_threads(vocab, kDtype);
  const dim3 grid = grid_for(rt, rows);
#define FP8T_CE_BWD(RT)                                                                       \
  cross_entropy_backward_kernel<kDtype, RT><<<grid, RowGroup<RT>::kThreads, 0, stream>>>( \
      logits, targets, lse, grad_scale, rows, vocab, dlogits, vectorize)
  switch (rt) {
    case 32: FP8T_CE_BWD(32); break;
    case 256: FP8T_CE_BWD(256); break;
    default: FP8T_CE_BWD(512); break;
  }
#undef FP8T_CE_BWD
}

// x[i] *= *factor over n fp32/bf16 elements, unless *factor == 1 (then every thread returns at
// once: the step's usual incoming gradient of the loss). 16-byte vectors where x is aligned.
template <int kDtype>
__global__ void scale_unless_one_kernel(void* x, int64_t n, const float* __restrict__ factor) {
  const float f = *factor;
  if (f == 1.0f) return;
  // ATen's mul_ by a 0-d float tensor converts the factor to x's dtype before multiplying.
  const float fx = round_to_dtype<kDtype>(f);
  constexpr int kPer = Elem<kDtype>::kPerVec;
  const bool vectorize = (reinterpret_cast<uintptr_t>(x) & (kVecBytes - 1)) == 0;
  const int64_t n_vec = vectorize ? n / kPer : 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  char* bytes = static_cast<char*>(x);
  for (int64_t i = first; i < n_vec; i += stride) {
    float v[kPer];
    Packed128::load(bytes + i * kVecBytes).unpack<kDtype>(v);
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] *= fx;
    Packed128::pack<kDtype>(v).store(bytes + i * kVecBytes);
  }
  for (int64_t c = n_vec * kPer + first; c < n; c += stride) store_elem<kDtype>(x, c, load_elem<kDtype>(x, c) * fx);
}

// The kernels index typed elements: a pointer must be aligned to its element size.
bool element_aligned(const void* p, int dtype) {
  return (reinterpret_cast<uintptr_t>(p) & (dtype == FP8T_DTYPE_F32 ? 3u : 1u)) == 0;
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_cross_entropy_forward(const void* logits, int logits_dtype,
                                                  const int64_t* targets, int64_t rows, int64_t vocab,
                                                  float* loss, float* lse, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_cross_entropy_forward");
  FP8T_KERNEL_REQUIRE(rows >= 0 && rows <= 0x7fffffff, "rows outside [0, 2^31-1]");
  FP8T_KERNEL_REQUIRE(vocab >= 1, "the vocabulary is empty");
  FP8T_KERNEL_REQUIRE(valid_dtype(logits_dtype), "the logits dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(rows == 0 || (logits != nullptr && targets != nullptr && loss != nullptr && lse != nullptr),
                      "no logits, targets, loss or lse for a nonempty batch");
  FP8T_KERNEL_REQUIRE(rows == 0 || element_aligned(logits, logits_dtype), "the logits are not element-aligned");
  if (rows == 0) return cudaSuccess;
  dispatch_dtype(logits_dtype, [&](auto dtype) {
    launch_forward<decltype(dtype)::value>(rows, vocab, stream, logits, targets, loss, lse);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t fp8t_cross_entropy_backward(const void* logits, int logits_dtype,
                                                   const int64_t* targets, const float* lse,
                                                   const float* grad_scale, int64_t rows, int64_t vocab,
                                                   void* dlogits, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_cross_entropy_backward");
  FP8T_KERNEL_REQUIRE(rows >= 0 && rows <= 0x7fffffff, "rows outside [0, 2^31-1]");
  FP8T_KERNEL_REQUIRE(vocab >= 1, "the vocabulary is empty");
  FP8T_KERNEL_REQUIRE(valid_dtype(logits_dtype), "the logits dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(rows == 0 || (logits != nullptr && targets != nullptr && lse != nullptr &&
                                    grad_scale != nullptr && dlogits != nullptr),
                      "no logits, targets, lse, grad_scale or dlogits for a nonempty batch");
  FP8T_KERNEL_REQUIRE(rows == 0 || (element_aligned(logits, logits_dtype) && element_aligned(dlogits, logits_dtype)),
                      "the logits or dlogits are not element-aligned");
  if (rows == 0) return cudaSuccess;
  // Vector accesses need logits and dlogits at the same offset within 16 bytes (then every row of
  // both splits at the same column).
  const bool vectorize = ((reinterpret_cast<uintptr_t>(logits) ^ reinterpret_cast<uintptr_t>(dlogits)) &
                          (kVecBytes - 1)) == 0;
  dispatch_dtype(logits_dtype, [&](auto dtype) {
    launch_backward<decltype(dtype)::value>(rows, vocab, stream, logits, targets, lse, grad_scale, dlogits,
                                            vectorize);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t fp8t_scale_unless_one(void* x, int dtype, int64_t n, const float* factor,
                                             cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_scale_unless_one");
  FP8T_KERNEL_REQUIRE(n >= 0, "a negative element count");
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype), "the dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(n == 0 || (x != nullptr && factor != nullptr), "no x or factor for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(n == 0 || element_aligned(x, dtype), "x is not element-aligned");
  if (n == 0) return cudaSuccess;
  // A grid that covers the GPU a few times over; threads loop over the rest.
  const int64_t want = (n + 8 * kBlockThreads - 1) / (8 * kBlockThreads);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(want, int64_t{8} * sm_count())));
  dispatch_dtype(dtype, [&](auto d) {
    scale_unless_one_kernel<decltype(d)::value><<<grid, kBlockThreads, 0, stream>>>(x, n, factor);
  });
  return cudaGetLastError();
}
