// LayerNorm and RMSNorm over the rows of x[rows, cols]: forward with an optional fused FP8 cast
// of the output (TE's LayerNormLinear, docs/fp8-formats.md), and backward. The add_norm variants
// fuse the residual add before the norm: the forward normalises r = x + h and writes r, the
// backward adds the gradient arriving at r from its other use and writes the gradients of x and h.
//
// Statistics and accumulation are FP32. Forward: one block per row; each thread keeps its
// columns (c = tid + k * blockDim) in registers when the row fits (kPer columns per thread),
// so x is read once; very wide rows (kPer = 0) re-read the row from global memory (L2).
// Backward: a fixed grid of blocks walks the rows (dy may be BF16 while x is FP32: the
// gradient of a BF16 consumer over an FP32 residual stream); every thread accumulates dgamma/dbeta of its
// own columns in registers, writes one partial row per block, and two more launches add the
// partials in a fixed order (runs of blocks, then the runs' sums): no atomics, deterministic.
// Rows of a width that is a multiple of 256 with aligned tensors take the vectorized kernels
// (8 consecutive columns per thread as 16-byte accesses; the backward, up to 4096 wide, loads the
// next row during this row's reduction; the forward goes up to 8192).
#include <algorithm>  // std::min

#include "dispatch.cuh"      // dispatch_dtype, dispatch_dtype_format
#include "fp8_device.cuh"    // load/store helpers, to_fp8, block_sum, block_amax_commit
#include "fp8t_kernels.h"    // the C API
#include "packed.cuh"        // ldg_floats, stg_floats (the vectorized backward)
#include "precondition.cuh"  // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;

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

// The branch dtype of a plain norm (no residual add).
constexpr int kNoBranch = -1;

// Columns per thread of the vectorized kernels (norm_forward_vec_kernel, norm_backward_vec_kernel):
// one 16-byte access of bf16, two of fp32.
constexpr int kVecCols = 8;

// Element c of the normalised row: x, or with a branch the residual sum x + h in FP32 (what an
// unfused ATen x + h of an FP32 x computes; __fadd_rn keeps it out of any FMA contraction).
template <int kDtype, int kHDtype>
__device__ __forceinline__ float row_input(const void* x, const void* h, int64_t i) {
  if constexpr (kHDtype == kNoBranch) {
    return load_elem<kDtype>(x, i);
  } else {
    return __fadd_rn(load_elem<kDtype>(x, i), load_elem<kHDtype>(h, i));
  }
}

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

template <int kPer>
struct RowCache {
  float v[kPer > 0 ? kPer : 1];
};

// kHDtype: the branch h's dtype (kNoBranch: a plain norm of x); with a branch the row is
// r = x + h, written to r_out. y has kYDtype.
template <int kDtype, int kHDtype, int kYDtype, int kFormat, int kPer>
__global__ void norm_forward_kernel(const void* __restrict__ x, const void* __restrict__ h,
                                    float* __restrict__ r_out, int64_t cols,
                                    const float* __restrict__ gamma, const float* __restrict__ beta,
                                    float eps, int rms, void* __restrict__ y, float* mean,
                                    float* rstd, const float* scale_ptr, uint8_t* __restrict__ y_fp8,
                                    float* amax, float* scale_inv_out) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  const bool fp8 = scale_ptr != nullptr;
  const bool want_amax = amax != nullptr;  // block-uniform: every thread reaches the commit or none
  const float scale = fp8 ? *scale_ptr : 1.0f;
  if (fp8 && blockIdx.x == 0 && threadIdx.x == 0 && scale_inv_out != nullptr) {
    *scale_inv_out = 1.0f / scale;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);

  RowCache<kPer> row;
  auto value = [&](int64_t c) -> float { return row_input<kDtype, kHDtype>(x, h, base + c); };
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      row.v[k] = c < cols ? value(c) : 0.0f;
    }
  }

  float mu = 0.0f;
  if (!rms) {
    float s = 0.0f;
    if constexpr (kPer > 0) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) s += row.v[k];
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += value(c);
    }
    mu = block_sum(s, scratch) * inv_cols;
  }
  // Two-pass variance (sum of squared deviations), more accurate than E[x^2] - mean^2.
  float s2 = 0.0f;
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      const float d = c < cols ? row.v[k] - mu : 0.0f;
      s2 += d * d;
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = value(c) - mu;
      s2 += d * d;
    }
  }
  const float var = block_sum(s2, scratch) * inv_cols;
  const float r = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }

  int local_max = 0;
  auto emit = [&](int64_t c, float xv) {
    if constexpr (kHDtype != kNoBranch) r_out[base + c] = xv;
    float yv = (xv - mu) * r * gamma[c];
    if (!rms && beta != nullptr) yv += beta[c];
    const float ys = round_to_dtype<kYDtype>(yv);  // the value y will read back as
    if (y != nullptr) store_elem<kYDtype>(y, base + c, ys);
    if (fp8) y_fp8[base + c] = to_fp8<kFormat>(ys * scale);
    if (want_amax) local_max = max(local_max, abs_bits(ys));
  };
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (c < cols) emit(c, row.v[k]);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) emit(c, value(c));
  }
  if (want_amax) block_amax_commit(local_max, amax);
}

// The forward for rows whose width is a multiple of 256 up to 8192 with aligned tensors: thread t
// owns the 8 consecutive columns [8t, 8t + 8), read and written as 16-byte vectors (the FP8
// codes as 8 bytes). The math per element is norm_forward_kernel's; only the order in which a
// row's sums (mean, squared deviations) are added differs (each thread's 8 columns, then the
// block).
template <int kDtype, int kHDtype, int kYDtype, int kFormat>
__global__ void __launch_bounds__(1024)
    norm_forward_vec_kernel(const void* __restrict__ x, const void* __restrict__ h, float* __restrict__ r_out,
                            int64_t cols, const float* __restrict__ gamma, const float* __restrict__ beta, float eps,
                            int rms, void* __restrict__ y, float* mean, float* rstd, const float* scale_ptr,
                            uint8_t* __restrict__ y_fp8, float* amax, float* scale_inv_out) {
  __shared__ float scratch[32];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * cols + static_cast<int64_t>(threadIdx.x) * kVecCols;
  const bool fp8 = scale_ptr != nullptr;
  const bool want_amax = amax != nullptr;  // block-uniform: every thread reaches the commit or none
  const float scale = fp8 ? *scale_ptr : 1.0f;
  if (fp8 && blockIdx.x == 0 && threadIdx.x == 0 && scale_inv_out != nullptr) {
    *scale_inv_out = 1.0f / scale;
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);

  float v[kVecCols];
  ldg_floats<kDtype>(x, first, v);
  if constexpr (kHDtype != kNoBranch) {
    float hv[kVecCols];
    ldg_floats<kHDtype>(h, first, hv);
#pragma unroll
    for (int k = 0; k < kVecCols; ++k) v[k] = __fadd_rn(v[k], hv[k]);
  }
  float mu = 0.0f;
  if (!rms) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kVecCols; ++k) s += v[k];
    mu = block_sum(s, scratch) * inv_cols;
  }
  float s2 = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecCols; ++k) {
    const float d = v[k] - mu;
    s2 += d * d;
  }
  const float var = block_sum(s2, scratch) * inv_cols;
  const float r = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
  if constexpr (kHDtype != kNoBranch) stg_floats<FP8T_DTYPE_F32>(r_out, first, v);

  const int64_t c0 = static_cast<int64_t>(threadIdx.x) * kVecCols;
  float g[kVecCols], b[kVecCols] = {};
  ldg_floats<FP8T_DTYPE_F32>(gamma, c0, g);
  const bool with_beta = !rms && beta != nullptr;
  if (with_beta) ldg_floats<FP8T_DTYPE_F32>(beta, c0, b);
  float ys[kVecCols];
  int local_max = 0;
#pragma unroll
  for (int k = 0; k < kVecCols; ++k) {
    float yv = (v[k] - mu) * r * g[k];
    if (with_beta) yv += b[k];
    ys[k] = round_to_dtype<kYDtype>(yv);  // the value y will read back as
    if (want_amax) local_max = max(local_max, abs_bits(ys[k]));
  }
  if (y != nullptr) stg_floats<kYDtype>(y, first, ys);
  if (fp8) {
    uint32_t w[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < kVecCols; ++k) {
      w[k / 4] |= static_cast<uint32_t>(to_fp8<kFormat>(ys[k] * scale)) << (8 * (k % 4));
    }
    *reinterpret_cast<uint2*>(y_fp8 + first) = make_uint2(w[0], w[1]);
  }
  if (want_amax) block_amax_commit(local_max, amax);
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

// Threads per block and columns per thread (0: the row does not fit in registers).
struct NormPolicy {
  int threads;
  int per;
};

NormPolicy norm_policy(int64_t cols) {
  const int per_options[] = {1, 2, 4, 8};
  for (int threads : {128, 256, 512}) {
    for (int per : per_options) {
      if (cols <= static_cast<int64_t>(threads) * per) return {threads, per};
    }
  }
  if (cols <= 512 * 16) return {512, 16};
  if (cols <= 512 * 32) return {512, 32};
  return {512, 0};
}

// The pointers and sizes of one forward launch (h and r only for the fused add).
struct ForwardArgs {
  const void* x;
  const void* h;
  float* r;
  int64_t rows, cols;
  const float* gamma;
  const float* beta;
  float eps;
  int rms;
  void* y;
  float* mean;
  float* rstd;
  const float* scale;
  uint8_t* y_fp8;
  float* amax;
  float* scale_inv_out;
};

// NormPolicy::per of the vectorized kernels (kVecCols per thread).
constexpr int kVecPolicy = -kVecCols;

template <int kDtype, int kHDtype, int kYDtype, int kFormat>
void launch_forward(NormPolicy p, const ForwardArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.rows));
  if (p.per == kVecPolicy) {
    norm_forward_vec_kernel<kDtype, kHDtype, kYDtype, kFormat><<<grid, p.threads, 0, stream>>>(
        a.x, a.h, a.r, a.cols, a.gamma, a.beta, a.eps, a.rms, a.y, a.mean, a.rstd, a.scale, a.y_fp8, a.amax,
        a.scale_inv_out);
    return;
  }
#define FP8T_NORM_FWD(PER)                                                                         \
  norm_forward_kernel<kDtype, kHDtype, kYDtype, kFormat, PER><<<grid, p.threads, 0, stream>>>(       \
      a.x, a.h, a.r, a.cols, a.gamma, a.beta, a.eps, a.rms, a.y, a.mean, a.rstd, a.scale, a.y_fp8, \
      a.amax, a.scale_inv_out)
  switch (p.per) {
    case 1: FP8T_NORM_FWD(1); break;
    case 2: FP8T_NORM_FWD(2); break;
    case 4: FP8T_NORM_FWD(4); break;
    case 8: FP8T_NORM_FWD(8); break;
    case 16: FP8T_NORM_FWD(16); break;
    case 32: FP8T_NORM_FWD(32); break;
    default: FP8T_NORM_FWD(0); break;
  }
#undef FP8T_NORM_FWD
}

// The vectorized forward's conditions: whole warps of 8-column threads, at most 1024 of them, and
// every tensor it reads or writes 16-byte aligned (the FP8 codes 8-byte).
bool forward_vectorized(const ForwardArgs& a) {
  const auto ok = [](const void* p, uintptr_t bytes) { return p == nullptr || aligned(p, bytes); };
  return a.cols % (32 * kVecCols) == 0 && a.cols <= 1024 * kVecCols && ok(a.x, 16) && ok(a.h, 16) && ok(a.r, 16) &&
         ok(a.y, 16) && ok(a.y_fp8, 8) && ok(a.gamma, 16) && ok(a.beta, 16);
}

NormPolicy forward_policy(const ForwardArgs& a) {
  return forward_vectorized(a) ? NormPolicy{static_cast<int>(a.cols / kVecCols), kVecPolicy} : norm_policy(a.cols);
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

// The checks every forward launcher makes (x_dtype: the dtype of x, or of h for the fused add);
// the parameter named fp8t_launcher_ is what FP8T_KERNEL_REQUIRE names.
cudaError_t check_forward(const char* fp8t_launcher_, const ForwardArgs& a, int x_dtype, int fp8_format) {
  FP8T_KERNEL_REQUIRE(a.rows >= 0 && a.rows <= 0x7fffffff, "rows outside [0, 2^31-1] (one block per row)");
  FP8T_KERNEL_REQUIRE(a.cols > 0, "rows have no columns");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(a.rows == 0 || (a.x != nullptr && a.gamma != nullptr && a.rstd != nullptr),
                      "no input, gamma or rstd output for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(a.rows == 0 || a.y != nullptr || a.scale != nullptr, "neither y nor an FP8 output is asked for");
  FP8T_KERNEL_REQUIRE(a.rms || a.rows == 0 || a.mean != nullptr, "LayerNorm needs a mean output");
  FP8T_KERNEL_REQUIRE(a.eps >= 0.0f, "eps is negative or NaN");
  FP8T_KERNEL_REQUIRE(a.scale == nullptr || a.y_fp8 != nullptr, "an FP8 output needs its code buffer");
  FP8T_KERNEL_REQUIRE(a.scale == nullptr || valid_format(fp8_format), "the FP8 format is not E4M3 or E5M2");
  return cudaSuccess;
}

// A forward of no rows: only the scale_inv snapshot to write, what a cast of nothing does.
cudaError_t empty_forward(const ForwardArgs& a, int dtype, int fp8_format, cudaStream_t stream) {
  if (a.scale == nullptr || a.scale_inv_out == nullptr) return cudaSuccess;
  return fp8t_cast(nullptr, dtype, 0, a.scale, fp8_format, nullptr, nullptr, a.scale_inv_out, stream);
}

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

extern "C" cudaError_t fp8t_norm_forward(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                         const float* gamma, const float* beta, float eps, int rms,
                                         void* y, float* mean, float* rstd, const float* scale,
                                         int fp8_format, uint8_t* y_fp8, float* amax,
                                         float* scale_inv_out, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_norm_forward");
  const ForwardArgs a{x,    nullptr,              nullptr, rows,  cols,  gamma, beta, eps, rms,
                      y,    rms ? nullptr : mean, rstd,    scale, y_fp8, amax,  scale_inv_out};
  if (check_forward(fp8t_launcher_, a, x_dtype, fp8_format) != cudaSuccess) return cudaErrorInvalidValue;
  if (rows == 0) return empty_forward(a, x_dtype, fp8_format, stream);
  const NormPolicy p = forward_policy(a);
  dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
    constexpr int kDtype = decltype(dtype)::value;
    launch_forward<kDtype, kNoBranch, kDtype, decltype(format)::value>(p, a, stream);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t fp8t_add_norm_forward(const float* x, const void* h, int h_dtype, int64_t rows, int64_t cols,
                                             float* r, const float* gamma, const float* beta, float eps, int rms,
                                             void* y, int y_dtype, float* mean, float* rstd, const float* scale,
                                             int fp8_format, uint8_t* y_fp8, float* amax, float* scale_inv_out,
                                             cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_add_norm_forward");
  const ForwardArgs a{x,    h,                    r,    rows,  cols,  gamma, beta, eps, rms,
                      y,    rms ? nullptr : mean, rstd, scale, y_fp8, amax,  scale_inv_out};
  if (check_forward(fp8t_launcher_, a, h_dtype, fp8_format) != cudaSuccess) return cudaErrorInvalidValue;
  FP8T_KERNEL_REQUIRE(valid_dtype(y_dtype), "the output dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(rows == 0 || (h != nullptr && r != nullptr), "no branch input or sum output for a nonempty tensor");
  if (rows == 0) return empty_forward(a, y_dtype, fp8_format, stream);
  const NormPolicy p = forward_policy(a);
  dispatch_dtype(h_dtype, [&](auto h_tag) {
    dispatch_dtype_format(y_dtype, fp8_format, [&](auto y_tag, auto format) {
      launch_forward<FP8T_DTYPE_F32, decltype(h_tag)::value, decltype(y_tag)::value, decltype(format)::value>(
          p, a, stream);
    });
  });
  return cudaGetLastError();
}

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
