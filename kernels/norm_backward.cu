// LayerNorm and RMSNorm over the rows of x[rows, cols], backward (the forward is in
// kernels/norm_forward.cu; the names both use are in kernels/norm_common.cuh). The add_norm
// variant is the backward of the residual add fused before the norm: it adds the gradient
// arriving at r from its other use and writes the gradients of x and h.
//
// Accumulation is FP32. A fixed grid of blocks walks the rows. dy may be BF16 while x is FP32:
// the gradient of a BF16 consumer over an FP32 residual stream. Every thread accumulates
// dgamma/dbeta of its own columns in registers and writes one partial row per block. Two more
// launches add the partials in a fixed order (runs of blocks, then the runs' sums): no atomics,
// deterministic. Rows of a width that is a multiple of 256, up to 4096, with aligned tensors
// take the vectorized kernel (8 consecutive columns per thread as 16-byte accesses), which loads
// the next row during this row's reduction.
#include <algorithm>  // std::min

#include "dispatch.cuh"      // dispatch_dtype
#include "fp8_device.cuh"    // load/store helpers, warp_sum, block_sum
#include "fp8t_kernels.h"    // the C API
#include "norm_common.cuh"   // kNoBranch, kVecCols, NormPolicy, kVecPolicy
#include "packed.cuh"        // ldg_floats, stg_floats (the vectorized backward)
#include "precondition.cuh"  // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE, aligned

// ---- kernels --------------------------------------------------------------------------------

namespace {

// Backward blocks: several waves of resident blocks on a large GPU (H200: 132 SMs x 2 blocks of
// 512 threads), so the per-row reductions of many blocks overlap. A fixed number (not a device
// query) keeps dgamma's summation order the same on every GPU.
constexpr int kMaxBackwardBlocks = 2048;
// The vectorized backward's grid (norm_backward_vec_kernel): two waves of its 2 resident blocks per
// SM on an H200; fewer, longer-lived blocks also write fewer dgamma partials. Measured at
// [16384, 2048] (bf16 dy, FP32 x and dr): 264 blocks 0.163 ms, 528 0.167, 2048 0.178.
constexpr int kVecBackwardBlocks = 528;

// The column sums of the backward's per-block partials, in two fixed-order stages: runs of
// blocks (kReduceChunks of them, so that the first stage fills the GPU: one thread per column
// alone would be a few blocks for thousands of partial rows), then the runs' sums in run order.
constexpr int kReduceChunks = 32;
constexpr int kReduceThreads = 256;

// block_sum of two values at once: each is summed in block_sum's order (so bit-equal to two
// block_sum calls) with one round of barriers instead of two. scratch: 32 float2.
__device__ __forceinline__ float2 block_sum2(float a, float b, float2* scratch) {
  a = warp_sum(a);
  b = warp_sum(b);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = make_float2(a, b);
  __syncthreads();
  const float2 t = lane < n_warps ? scratch[lane] : make_float2(0.0f, 0.0f);
  return make_float2(warp_sum(t.x), warp_sum(t.y));
}

// kHDtype != kNoBranch: the backward of the fused add (x is r, float32): dx = the norm's gradient
// + dr (the gradient at r from its other use; null: none), also written to dh in kHDtype.
// At most 4 columns per thread: 64 registers, so two 512-thread blocks share an SM (more warps to
// hide the latency of each row's loads and reductions); 8 columns (rows up to 4096 wide) take more.
// One function on purpose (about 90 lines): the two passes over a row share the per-thread
// register arrays (dy, xhat, dy*gamma, dr) across the block reduction between them, and the
// register budget above was measured on this shape of the code.
template <int kDyDtype, int kDtype, int kHDtype, int kPer>
__global__ void __launch_bounds__(512, kPer > 0 && kPer <= 4 ? 2 : 1)
    norm_backward_kernel(const void* __restrict__ dy, const void* __restrict__ x, int64_t rows, int64_t cols,
                         const float* __restrict__ gamma, const float* __restrict__ mean,
                         const float* __restrict__ rstd, int rms, void* __restrict__ dx,
                         float* __restrict__ dgamma_part, float* __restrict__ dbeta_part,
                         const float* __restrict__ dr, void* __restrict__ dh) {
  // The gradient of the row's input: the norm's, plus with the fused add the residual's other
  // term, added in FP32 after the norm's value is rounded (as autograd sums the two unfused).
  // dr_value: dr[i], read early by the caller where it can (its load then overlaps the reductions).
  auto store_dx = [&](int64_t i, float dnorm, float dr_value) {
    if constexpr (kHDtype == kNoBranch) {
      store_elem<kDtype>(dx, i, dnorm);
    } else {
      const float total = dr != nullptr ? __fadd_rn(dnorm, dr_value) : dnorm;
      store_elem<kDtype>(dx, i, total);
      if (dh != nullptr) store_elem<kHDtype>(dh, i, total);
    }
  };
  __shared__ float scratch[32];
  __shared__ float2 scratch2[32];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float* my_dgamma = dgamma_part + static_cast<int64_t>(blockIdx.x) * cols;
  float* my_dbeta = dbeta_part + static_cast<int64_t>(blockIdx.x) * cols;

  constexpr int kN = kPer > 0 ? kPer : 1;
  float dg_acc[kN], db_acc[kN], xh[kN], g[kN], dyv[kN], drv[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) dg_acc[k] = db_acc[k] = 0.0f;
  if constexpr (kPer == 0) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) my_dgamma[c] = my_dbeta[c] = 0.0f;
  }

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    const float mu = rms ? 0.0f : mean[row];
    const float r = rstd[row];
    // Pass 1: a = sum(dy * gamma), b = sum(dy * gamma * xhat).
    float a = 0.0f, b = 0.0f;
    if constexpr (kPer > 0) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (c < cols) {
          dyv[k] = load_elem<kDyDtype>(dy, base + c);
          xh[k] = (load_elem<kDtype>(x, base + c) - mu) * r;
          g[k] = dyv[k] * gamma[c];
          drv[k] = kHDtype != kNoBranch && dr != nullptr ? dr[base + c] : 0.0f;
        } else {
          dyv[k] = xh[k] = g[k] = drv[k] = 0.0f;
        }
        a += g[k];
        b += g[k] * xh[k];
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float gk = load_elem<kDyDtype>(dy, base + c) * gamma[c];
        a += gk;
        b += gk * (load_elem<kDtype>(x, base + c) - mu) * r;
      }
    }
    float mean_a = 0.0f, mean_b;
    if (rms) {
      mean_b = block_sum(b, scratch) * inv_cols;
    } else {
      const float2 ba = block_sum2(b, a, scratch2);
      mean_b = ba.x * inv_cols;
      mean_a = ba.y * inv_cols;
    }
    // Pass 2: dx = rstd * (dy*gamma - mean_a - xhat * mean_b); dgamma += dy*xhat; dbeta += dy.
    if constexpr (kPer > 0) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (c < cols) {
          store_dx(base + c, r * (g[k] - mean_a - xh[k] * mean_b), drv[k]);
          dg_acc[k] += dyv[k] * xh[k];
          db_acc[k] += dyv[k];
        }
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = load_elem<kDyDtype>(dy, base + c);
        const float xk = (load_elem<kDtype>(x, base + c) - mu) * r;
        store_dx(base + c, r * (d * gamma[c] - mean_a - xk * mean_b),
                 kHDtype != kNoBranch && dr != nullptr ? dr[base + c] : 0.0f);
        my_dgamma[c] += d * xk;  // this thread owns column c in every row: no race
        my_dbeta[c] += d;
      }
    }
  }
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (c < cols) {
        my_dgamma[c] = dg_acc[k];
        my_dbeta[c] = db_acc[k];
      }
    }
  }
}

// The backward for rows whose width is a multiple of 256 up to 4096 with 16-byte-aligned
// tensors (every model width fp8train builds): thread t owns the 8 consecutive columns
// [8t, 8t + 8), read and written as 16-byte vectors, and the next row's dy, x and dr are loaded
// before this row's block reduction, so the loads of one row overlap the reduction and the
// stores of the previous one. At [16384, 2048] with the residual add (bf16 dy and dh, FP32 x, dr,
// dx: 16 bytes per element) on an H200: 0.167 ms (3.2 TB/s) against norm_backward_kernel's 0.230. The math per element is norm_backward_kernel's; only the order in
// which a row's sums a and b are added differs (each thread's 8 columns, then the block).
template <int kDyDtype, int kDtype, int kHDtype>
__global__ void __launch_bounds__(512)
    norm_backward_vec_kernel(const void* __restrict__ dy, const void* __restrict__ x, int64_t rows, int64_t cols,
                             const float* __restrict__ gamma, const float* __restrict__ mean,
                             const float* __restrict__ rstd, int rms, void* __restrict__ dx,
                             float* __restrict__ dgamma_part, float* __restrict__ dbeta_part,
                             const float* __restrict__ dr, void* __restrict__ dh) {
  __shared__ float scratch[32];
  __shared__ float2 scratch2[32];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int64_t c0 = static_cast<int64_t>(threadIdx.x) * kVecCols;
  const bool with_dr = kHDtype != kNoBranch && dr != nullptr;
  float gam[kVecCols], dg_acc[kVecCols], db_acc[kVecCols];
  ldg_floats<FP8T_DTYPE_F32>(gamma, c0, gam);
#pragma unroll
  for (int k = 0; k < kVecCols; ++k) dg_acc[k] = db_acc[k] = 0.0f;

  // This row's dy, x and dr (zeros without dr), and the next row's, loaded ahead.
  float dyv[kVecCols], xv[kVecCols], drv[kVecCols];
  float dy_next[kVecCols] = {}, x_next[kVecCols] = {}, dr_next[kVecCols] = {};
  auto load_row = [&](int64_t row, float (&d)[kVecCols], float (&xx)[kVecCols], float (&rr)[kVecCols]) {
    ldg_floats<kDyDtype>(dy, row * cols + c0, d);
    ldg_floats<kDtype>(x, row * cols + c0, xx);
    if (with_dr) {
      ldg_floats<FP8T_DTYPE_F32>(dr, row * cols + c0, rr);
    } else {
#pragma unroll
      for (int k = 0; k < kVecCols; ++k) rr[k] = 0.0f;
    }
  };
  int64_t row = blockIdx.x;
  if (row < rows) load_row(row, dyv, xv, drv);
  for (; row < rows; row += gridDim.x) {
    const float mu = rms ? 0.0f : mean[row];
    const float r = rstd[row];
    // Pass 1: a = sum(dy * gamma), b = sum(dy * gamma * xhat). Every product and sum is an
    // explicit IEEE operation (no contraction left to the compiler), so the kernel's instances
    // for other input dtypes (bf16 dy read as its fp32 value) give the same bits.
    float a = 0.0f, b = 0.0f, xh[kVecCols], g[kVecCols];
#pragma unroll
    for (int k = 0; k < kVecCols; ++k) {
      xh[k] = __fmul_rn(__fsub_rn(xv[k], mu), r);
      g[k] = __fmul_rn(dyv[k], gam[k]);
      a = __fadd_rn(a, g[k]);
      b = __fmaf_rn(g[k], xh[k], b);
    }
    const int64_t next = row + gridDim.x;
    if (next < rows) load_row(next, dy_next, x_next, dr_next);
    float mean_a = 0.0f, mean_b;
    if (rms) {
      mean_b = block_sum(b, scratch) * inv_cols;
    } else {
      const float2 ba = block_sum2(b, a, scratch2);
      mean_b = ba.x * inv_cols;
      mean_a = ba.y * inv_cols;
    }
    // Pass 2: dx = rstd * (dy*gamma - mean_a - xhat * mean_b) (+ dr); dgamma += dy*xhat; dbeta += dy.
    float out[kVecCols];
#pragma unroll
    for (int k = 0; k < kVecCols; ++k) {
      const float dnorm = __fmul_rn(r, __fsub_rn(__fsub_rn(g[k], mean_a), __fmul_rn(xh[k], mean_b)));
      if constexpr (kHDtype == kNoBranch) {
        out[k] = dnorm;
      } else {
        out[k] = with_dr ? __fadd_rn(dnorm, drv[k]) : dnorm;
      }
      dg_acc[k] = __fmaf_rn(dyv[k], xh[k], dg_acc[k]);
      db_acc[k] = __fadd_rn(db_acc[k], dyv[k]);
    }
    stg_floats<kDtype>(dx, row * cols + c0, out);
    if constexpr (kHDtype != kNoBranch) {
      if (dh != nullptr) stg_floats<kHDtype>(dh, row * cols + c0, out);
    }
#pragma unroll
    for (int k = 0; k < kVecCols; ++k) {
      dyv[k] = dy_next[k];
      xv[k] = x_next[k];
      drv[k] = dr_next[k];
    }
  }
  stg_floats<FP8T_DTYPE_F32>(dgamma_part + static_cast<int64_t>(blockIdx.x) * cols, c0, dg_acc);
  stg_floats<FP8T_DTYPE_F32>(dbeta_part + static_cast<int64_t>(blockIdx.x) * cols, c0, db_acc);
}

// What the column sums read and write; blockIdx.z selects the quantity (0: dgamma, 1: dbeta).
struct ColumnSums {
  const float* part[2];  // [n_parts, cols]
  float* chunk[2];       // [kReduceChunks, cols]
  float* out[2];         // [cols]
};

// chunk[k][c] = sum over the blocks b of run k (in order) of part[b][c].
__global__ void column_chunk_sum_kernel(ColumnSums s, int n_parts, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int per_chunk = (n_parts + kReduceChunks - 1) / kReduceChunks;
  const int first = static_cast<int>(blockIdx.y) * per_chunk;
  const int last = min(n_parts, first + per_chunk);
  const float* part = s.part[blockIdx.z];
  float acc = 0.0f;
  for (int b = first; b < last; ++b) acc += part[static_cast<int64_t>(b) * cols + c];
  s.chunk[blockIdx.z][static_cast<int64_t>(blockIdx.y) * cols + c] = acc;
}

// out[c] = sum over runs k (in order) of chunk[k][c].
__global__ void column_total_kernel(ColumnSums s, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float* chunk = s.chunk[blockIdx.z];
  float acc = 0.0f;
  for (int k = 0; k < kReduceChunks; ++k) acc += chunk[static_cast<int64_t>(k) * cols + c];
  s.out[blockIdx.z][c] = acc;
}

// The pointers and sizes of one backward launch (dr and dh only for the fused add).
struct BackwardArgs {
  const void* dy;
  const void* x;
  int64_t rows, cols;
  const float* gamma;
  const float* mean;
  const float* rstd;
  int rms;
  void* dx;
  float* dgamma_part;
  float* dbeta_part;
  const float* dr;
  void* dh;
};

template <int kDyDtype, int kDtype, int kHDtype>
void launch_backward(NormPolicy p, int blocks, const BackwardArgs& a, cudaStream_t stream) {
  if (p.per == kVecPolicy) {
    norm_backward_vec_kernel<kDyDtype, kDtype, kHDtype><<<blocks, p.threads, 0, stream>>>(
        a.dy, a.x, a.rows, a.cols, a.gamma, a.mean, a.rstd, a.rms, a.dx, a.dgamma_part, a.dbeta_part, a.dr, a.dh);
    return;
  }
#define FP8T_NORM_BWD(PER)                                                                        \
  norm_backward_kernel<kDyDtype, kDtype, kHDtype, PER><<<blocks, p.threads, 0, stream>>>(          \
      a.dy, a.x, a.rows, a.cols, a.gamma, a.mean, a.rstd, a.rms, a.dx, a.dgamma_part, a.dbeta_part, \
      a.dr, a.dh)
  switch (p.per) {
    case 1: FP8T_NORM_BWD(1); break;
    case 2: FP8T_NORM_BWD(2); break;
    case 4: FP8T_NORM_BWD(4); break;
    case 8: FP8T_NORM_BWD(8); break;
    // Backward keeps 6 values per column in registers; beyond 8 columns a thread would spill.
    default: FP8T_NORM_BWD(0); break;
  }
#undef FP8T_NORM_BWD
}

// Backward threads and columns per thread: at most 4 columns per thread for rows up to 2048 wide
// (see norm_backward_kernel's launch bounds), 8 up to 4096; wider rows are re-read (kPer = 0).
NormPolicy backward_policy(int64_t cols) {
  for (int threads : {128, 256, 512}) {
    for (int per : {1, 2, 4}) {
      if (cols <= static_cast<int64_t>(threads) * per) return {threads, per};
    }
  }
  if (cols <= 512 * 8) return {512, 8};
  return {512, 0};
}

// The vectorized backward's conditions: whole warps of 8-column threads, at most 512 of them, and
// every tensor it reads or writes 16-byte aligned (rows then start aligned too: cols % 8 == 0).
bool backward_vectorized(const BackwardArgs& a) {
  const auto ok = [](const void* p) { return p == nullptr || aligned(p, 16); };
  return a.cols % (32 * kVecCols) == 0 && a.cols <= 512 * kVecCols && ok(a.dy) && ok(a.x) && ok(a.dx) &&
         ok(a.dr) && ok(a.dh) && ok(a.gamma);
}

int backward_blocks(int64_t rows) {
  return static_cast<int>(rows < kMaxBackwardBlocks ? (rows < 1 ? 1 : rows) : kMaxBackwardBlocks);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

namespace {

// The checks every backward launcher makes.
cudaError_t check_backward(const char* fp8t_launcher_, const BackwardArgs& a, const float* dgamma,
                           const void* workspace) {
  FP8T_KERNEL_REQUIRE(a.rows >= 0, "rows is negative");
  FP8T_KERNEL_REQUIRE(a.cols > 0, "rows have no columns");
  FP8T_KERNEL_REQUIRE(a.gamma != nullptr && dgamma != nullptr, "no gamma or dgamma output");
  FP8T_KERNEL_REQUIRE(workspace != nullptr, "no workspace");
  FP8T_KERNEL_REQUIRE(aligned(workspace, 16), "the workspace is not 16-byte aligned");
  FP8T_KERNEL_REQUIRE(a.rows == 0 || (a.dy != nullptr && a.x != nullptr && a.rstd != nullptr && a.dx != nullptr),
                      "no dy, x, rstd or dx for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(a.rms || a.rows == 0 || a.mean != nullptr, "LayerNorm needs the saved mean");
  return cudaSuccess;
}

// Points the per-block partials into the workspace, runs `launch` (the row kernel) and adds the
// partials into dgamma/dbeta in block order. No rows: zero gradients.
template <typename Launch>
cudaError_t run_backward(BackwardArgs& a, float* dgamma, float* dbeta, void* workspace, cudaStream_t stream,
                         Launch&& launch) {
  float* want_dbeta = a.rms ? nullptr : dbeta;
  if (a.rows == 0) {
    cudaError_t err = cudaMemsetAsync(dgamma, 0, a.cols * sizeof(float), stream);
    if (err == cudaSuccess && want_dbeta != nullptr) err = cudaMemsetAsync(want_dbeta, 0, a.cols * sizeof(float), stream);
    return err;
  }
  const bool vectorized = backward_vectorized(a);
  const NormPolicy p = vectorized ? NormPolicy{static_cast<int>(a.cols / kVecCols), kVecPolicy}
                                  : backward_policy(a.cols);
  const int blocks = vectorized ? static_cast<int>(std::min<int64_t>(a.rows, kVecBackwardBlocks))
                                : backward_blocks(a.rows);
  a.dgamma_part = static_cast<float*>(workspace);
  a.dbeta_part = a.dgamma_part + static_cast<int64_t>(blocks) * a.cols;
  launch(p, blocks);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  float* chunks = a.dbeta_part + static_cast<int64_t>(blocks) * a.cols;
  const ColumnSums sums{{a.dgamma_part, a.dbeta_part},
                        {chunks, chunks + static_cast<int64_t>(kReduceChunks) * a.cols},
                        {dgamma, want_dbeta}};
  const unsigned column_blocks = static_cast<unsigned>((a.cols + kReduceThreads - 1) / kReduceThreads);
  const unsigned quantities = want_dbeta != nullptr ? 2 : 1;
  column_chunk_sum_kernel<<<dim3(column_blocks, kReduceChunks, quantities), kReduceThreads, 0, stream>>>(
      sums, blocks, a.cols);
  column_total_kernel<<<dim3(column_blocks, 1, quantities), kReduceThreads, 0, stream>>>(sums, a.cols);
  return cudaGetLastError();
}

}  // namespace

extern "C" size_t fp8t_norm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  if (cols <= 0) return 16;
  // dgamma and dbeta: the per-block partials, then the per-run sums.
  return 2 * static_cast<size_t>(backward_blocks(rows) + kReduceChunks) * static_cast<size_t>(cols) * sizeof(float);
}

extern "C" cudaError_t fp8t_norm_backward(const void* dy, int dy_dtype, const void* x, int dtype, int64_t rows,
                                          int64_t cols, const float* gamma, const float* mean,
                                          const float* rstd, int rms, void* dx, float* dgamma,
                                          float* dbeta, void* workspace, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_norm_backward");
  BackwardArgs a{dy, x, rows, cols, gamma, mean, rstd, rms, dx, nullptr, nullptr, nullptr, nullptr};
  if (check_backward(fp8t_launcher_, a, dgamma, workspace) != cudaSuccess) return cudaErrorInvalidValue;
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype) && valid_dtype(dy_dtype), "x or dy is not fp32 or bf16");
  return run_backward(a, dgamma, dbeta, workspace, stream, [&](NormPolicy p, int blocks) {
    dispatch_dtype(dtype, [&](auto x_tag) {
      dispatch_dtype(dy_dtype, [&](auto dy_tag) {
        launch_backward<decltype(dy_tag)::value, decltype(x_tag)::value, kNoBranch>(p, blocks, a, stream);
      });
    });
  });
}

extern "C" cudaError_t fp8t_add_norm_backward(const void* dy, int dy_dtype, const float* r, const float* dr,
                                              int64_t rows, int64_t cols, const float* gamma, const float* mean,
                                              const float* rstd, int rms, float* dx, void* dh, int h_dtype,
                                              float* dgamma, float* dbeta, void* workspace, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_add_norm_backward");
  BackwardArgs a{dy, r, rows, cols, gamma, mean, rstd, rms, dx, nullptr, nullptr, dr, dh};
  if (check_backward(fp8t_launcher_, a, dgamma, workspace) != cudaSuccess) return cudaErrorInvalidValue;
  FP8T_KERNEL_REQUIRE(valid_dtype(dy_dtype), "dy is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(dh == nullptr || valid_dtype(h_dtype), "dh's dtype is not fp32 or bf16");
  return run_backward(a, dgamma, dbeta, workspace, stream, [&](NormPolicy p, int blocks) {
    dispatch_dtype(dy_dtype, [&](auto dy_tag) {
      dispatch_dtype(h_dtype, [&](auto h_tag) {
        launch_backward<decltype(dy_tag)::value, FP8T_DTYPE_F32, decltype(h_tag)::value>(p, blocks, a, stream);
      });
    });
  });
}
