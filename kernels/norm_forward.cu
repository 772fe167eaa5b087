// LayerNorm and RMSNorm over the rows of x[rows, cols], forward, with an optional fused FP8 cast
// of the output (TE's LayerNormLinear, docs/fp8-formats.md). The add_norm variant fuses the
// residual add before the norm: it normalises r = x + h and writes r. The backward is in
// kernels/norm_backward.cu; the names both use are in kernels/norm_common.cuh.
//
// Statistics are FP32. One block normalises one row. Each thread keeps its columns
// (c = tid + k * blockDim) in registers when the row fits (kPer columns per thread), so x is read
// once. Very wide rows (kPer = 0) re-read the row from global memory (L2). Rows of a width that is
// a multiple of 256, up to 8192, with aligned tensors take the vectorized kernel (8 consecutive
// columns per thread as 16-byte accesses).
#include "dispatch.cuh"      // dispatch_dtype, dispatch_dtype_format
#include "fp8_device.cuh"    // load/store helpers, to_fp8, block_sum, block_amax_commit
#include "fp8t_kernels.h"    // the C API
#include "norm_common.cuh"   // kNoBranch, kVecCols, NormPolicy, kVecPolicy
#include "packed.cuh"        // ldg_floats, stg_floats (the vectorized forward)
#include "precondition.cuh"  // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE, aligned

// ---- kernels --------------------------------------------------------------------------------

namespace {

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
  FP8T_KERNEL_REQUIRE(a.rows == 0 || a.y != nullptr || a.scale != nullptr || a.amax != nullptr,
                      "neither y, an FP8 output nor an amax is asked for");
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
