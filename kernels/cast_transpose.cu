// Cast + transpose: one read of x[rows, cols] writes the rowwise FP8 codes [rows, cols] and the
// columnwise codes [cols, rows] (what dgrad/wgrad need on Hopper, docs/fp8-formats.md),
// with the fused amax and, for gradients, dbias = column sums in FP32 (TE's bgrad_quantize).
// Tiling, the transposed store and the dbias order: kernels/cast_tile.cuh.
#include "activation.cuh"     // gelu_tanh, gelu_tanh_backward, Act, dispatch_act
#include "cast_tile.cuh"      // tile::*, load_chunk, store_chunk, store_transposed, reduce_dbias
#include "dispatch.cuh"       // dispatch_dtype_format, dispatch_bool
#include "fp8_device.cuh"     // load/convert helpers, block_amax_commit
#include "fp8t_kernels.h"     // the C API
#include "packed.cuh"         // Packed
#include "precondition.cuh"   // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;
using namespace fp8t::kern::tile;

// What the kernel casts (Act of kernels/activation.cuh) is rounded to the input dtype before the
// cast.

// Loads the 8 values the cast sees at (row, col..col+7): x, gelu(x) or dy * gelu'(h).
template <int kDtype, int kAct>
__device__ __forceinline__ void load8_act(const void* x, const void* h, int64_t cols, int64_t rows,
                                          int64_t row, int64_t col, bool vec, float (&v)[kChunk]) {
  load_chunk<kDtype>(x, cols, rows, cols, row, col, vec, v);
  if constexpr (kAct == kActGelu) {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) v[j] = round_to_dtype<kDtype>(gelu_tanh(v[j]));
  } else if constexpr (kAct == kActDgelu) {
    float hv[kChunk];
    load_chunk<kDtype>(h, cols, rows, cols, row, col, vec, hv);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) v[j] = round_to_dtype<kDtype>(gelu_tanh_backward(v[j], hv[j]));
  }
}

template <int kDtype, int kFormat, bool kDbias, int kAct>
__global__ void __launch_bounds__(kThreads)
    cast_transpose_kernel(const void* __restrict__ x, const void* __restrict__ h, int64_t rows, int64_t cols,
                          const float* __restrict__ scale_ptr, uint8_t* __restrict__ out_row,
                          uint8_t* __restrict__ out_col, float* amax, float* scale_inv_out,
                          float* __restrict__ dbias_partial, bool vec) {
  __shared__ uint8_t tile[kTile][kTileStride];
  __shared__ float col_sums[kDbias ? kRowsPerPass : 1][kDbias ? kSumStride : 1];

  const float scale = *scale_ptr;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && scale_inv_out != nullptr) {
    *scale_inv_out = 1.0f / scale;
  }
  const Geom g = geom(rows, cols);
  const int tc = threadIdx.x % kChunksPerRow;
  const int tr = threadIdx.x / kChunksPerRow;
  const int64_t col = g.c0 + kChunk * tc;

  int local_max = 0;
  float sum[kChunk];
#pragma unroll
  for (int j = 0; j < kChunk; ++j) sum[j] = 0.0f;

#pragma unroll
  for (int pass = 0; pass < kTile / kRowsPerPass; ++pass) {
    const int r = tr + pass * kRowsPerPass;
    const int64_t row = g.r0 + r;
    float v[kChunk];
    load8_act<kDtype, kAct>(x, h, cols, rows, row, col, g.full && vec, v);
    uint8_t q[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; j += 2) {
      const uint32_t two = to_fp8x2<kFormat>(v[j] * scale, v[j + 1] * scale);
      q[j] = static_cast<uint8_t>(two & 0xffu);
      q[j + 1] = static_cast<uint8_t>(two >> 8);
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      local_max = max(local_max, abs_bits(v[j]));
      tile[r][kChunk * tc + j] = q[j];
      if constexpr (kDbias) sum[j] += v[j];
    }
    if (out_row != nullptr) store_chunk(q, out_row, cols, rows, cols, row, col, g.full && vec);
  }
  if constexpr (kDbias) {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) col_sums[tr][kChunk * tc + j] = sum[j];
  }
  __syncthreads();

  if (out_col != nullptr) store_transposed(tile, out_col, rows, cols, g, vec);

  if constexpr (kDbias) {
    if (threadIdx.x < kTile) write_partial_sums(col_sums, dbias_partial, cols, rows, cols, g, threadIdx.x);
  }
  block_amax_commit(local_max, amax);
}

__global__ void __launch_bounds__(kThreads)
    transpose_codes_kernel(const uint8_t* __restrict__ in, int64_t rows, int64_t cols,
                           uint8_t* __restrict__ out, bool vec) {
  __shared__ uint8_t tile[kTile][kTileStride];
  const Geom g = geom(rows, cols);
  const int tc = threadIdx.x % kChunksPerRow;
  const int tr = threadIdx.x / kChunksPerRow;
  const int64_t col = g.c0 + kChunk * tc;
#pragma unroll
  for (int pass = 0; pass < kTile / kRowsPerPass; ++pass) {
    const int r = tr + pass * kRowsPerPass;
    const int64_t row = g.r0 + r;
    uint8_t q[kChunk];
    if (g.full && vec) {
      CodeChunk::ldg(in + row * cols + col).to_bytes(q);
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) q[j] = (row < rows && col + j < cols) ? in[row * cols + col + j] : 0;
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) tile[r][kChunk * tc + j] = q[j];
  }
  __syncthreads();
  store_transposed(tile, out, rows, cols, g, vec);
}

// Everything a cast+transpose launch needs besides its template choices.
struct CastArgs {
  const void* x;
  const void* h;  // kActDgelu only: the GELU input
  int64_t rows, cols;
  const float* scale;
  uint8_t* out_row;
  uint8_t* out_col;
  float* amax;
  float* scale_inv_out;
  float* partial;  // dbias partial sums (kDbias only)
  bool vec;
};

void launch_cast_transpose(int act, int x_dtype, bool want_dbias, int fp8_format, dim3 grid, cudaStream_t stream,
                           const CastArgs& a) {
  dispatch_act(act, [&](auto act_tag) {
    dispatch_bool(want_dbias, [&](auto dbias_tag) {
      dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
        cast_transpose_kernel<decltype(dtype)::value, decltype(format)::value, decltype(dbias_tag)::value,
                              decltype(act_tag)::value><<<grid, kThreads, 0, stream>>>(
            a.x, a.h, a.rows, a.cols, a.scale, a.out_row, a.out_col, a.amax, a.scale_inv_out, a.partial, a.vec);
      });
    });
  });
}

// The checks and the launch behind every cast+transpose launcher; `launcher` names the entry point
// in a failed check.
cudaError_t cast_transpose_impl(const char* launcher, int act, const void* x, const void* h, int x_dtype,
                                int64_t rows, int64_t cols, const float* scale, int fp8_format,
                                uint8_t* out_row, uint8_t* out_col, float* amax, float* scale_inv_out,
                                float* dbias, void* workspace, cudaStream_t stream) {
  FP8T_LAUNCHER(launcher);
  const bool want_dbias = dbias != nullptr;
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(scale != nullptr, "no scale");
  FP8T_KERNEL_REQUIRE(rows * cols == 0 || x != nullptr, "no input for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(act != kActDgelu || rows * cols == 0 || h != nullptr, "no GELU input for the GELU backward");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(valid_format(fp8_format), "the FP8 format is not E4M3 or E5M2");
  FP8T_KERNEL_REQUIRE(!want_dbias || workspace != nullptr, "dbias needs a workspace");
  FP8T_KERNEL_REQUIRE(!want_dbias || aligned(workspace, 16), "the dbias workspace is not 16-byte aligned");
  FP8T_KERNEL_REQUIRE(n_tiles(rows) <= kMaxRowTiles, "rows need more than 65535 tiles of 64 (the grid's y limit)");
  FP8T_KERNEL_REQUIRE(n_tiles(cols) <= kMaxColTiles, "cols need more than 2^31-1 tiles of 64");
  // Vector accesses need every row start aligned: 8-element chunks of x (16 or 32 bytes) and of
  // the codes (8 bytes) in both layouts.
  const bool vec = cols % kChunk == 0 && rows % kChunk == 0 && aligned(x, 16) && (h == nullptr || aligned(h, 16)) &&
                   (out_row == nullptr || aligned(out_row, 8)) &&
                   (out_col == nullptr || aligned(out_col, 8));
  float* partial = want_dbias ? static_cast<float*>(workspace) : nullptr;
  const CastArgs args{x, h, rows, cols, scale, out_row, out_col, amax, scale_inv_out, partial, vec};
  launch_cast_transpose(act, x_dtype, want_dbias, fp8_format, grid(rows, cols), stream, args);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || !want_dbias) return err;
  return reduce_dbias(partial, rows, cols, dbias, stream);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_cast_transpose(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                           const float* scale, int fp8_format,
                                           uint8_t* out_rowwise, uint8_t* out_columnwise,
                                           float* amax, float* scale_inv_out, cudaStream_t stream) {
  return cast_transpose_impl("fp8t_cast_transpose", kActNone, x, nullptr, x_dtype, rows, cols, scale, fp8_format,
                             out_rowwise, out_columnwise, amax, scale_inv_out, nullptr, nullptr, stream);
}

extern "C" size_t fp8t_cast_transpose_dbias_workspace_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 16;
  return static_cast<size_t>(n_tiles(rows)) * static_cast<size_t>(cols) * sizeof(float);
}

extern "C" cudaError_t fp8t_cast_transpose_dbias(const void* x, int x_dtype, int64_t rows,
                                                 int64_t cols, const float* scale, int fp8_format,
                                                 uint8_t* out_rowwise, uint8_t* out_columnwise,
                                                 float* amax, float* scale_inv_out, float* dbias,
                                                 void* workspace, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_cast_transpose_dbias");
  FP8T_KERNEL_REQUIRE(dbias != nullptr, "no dbias output");
  return cast_transpose_impl(fp8t_launcher_, kActNone, x, nullptr, x_dtype, rows, cols, scale, fp8_format,
                             out_rowwise, out_columnwise, amax, scale_inv_out, dbias, workspace, stream);
}

extern "C" cudaError_t fp8t_gelu_cast_transpose(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                                const float* scale, int fp8_format, uint8_t* out_rowwise,
                                                uint8_t* out_columnwise, float* amax, float* scale_inv_out,
                                                cudaStream_t stream) {
  return cast_transpose_impl("fp8t_gelu_cast_transpose", kActGelu, x, nullptr, x_dtype, rows, cols, scale,
                             fp8_format, out_rowwise, out_columnwise, amax, scale_inv_out, nullptr, nullptr, stream);
}

extern "C" cudaError_t fp8t_dgelu_cast_transpose(const void* dy, const void* x, int dtype, int64_t rows,
                                                 int64_t cols, const float* scale, int fp8_format,
                                                 uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                                 float* scale_inv_out, float* dbias, void* workspace,
                                                 cudaStream_t stream) {
  return cast_transpose_impl("fp8t_dgelu_cast_transpose", kActDgelu, dy, x, dtype, rows, cols, scale, fp8_format,
                             out_rowwise, out_columnwise, amax, scale_inv_out, dbias, workspace, stream);
}

extern "C" cudaError_t fp8t_cast_transpose_act(int act, const void* x, const void* h, int dtype, int64_t rows,
                                               int64_t cols, const float* scale, int fp8_format,
                                               uint8_t* out_rowwise, uint8_t* out_columnwise, float* amax,
                                               float* scale_inv_out, float* dbias, void* workspace,
                                               cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_cast_transpose_act");
  FP8T_KERNEL_REQUIRE(act == kActNone || act == kActGelu || act == kActDgelu, "unknown activation code");
  return cast_transpose_impl(fp8t_launcher_, act, x, h, dtype, rows, cols, scale, fp8_format, out_rowwise,
                             out_columnwise, amax, scale_inv_out, dbias, workspace, stream);
}

extern "C" cudaError_t fp8t_transpose_codes(const uint8_t* in, int64_t rows, int64_t cols,
                                            uint8_t* out, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_transpose_codes");
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(rows * cols == 0 || (in != nullptr && out != nullptr), "no input or output for a nonempty tensor");
  if (rows * cols == 0) return cudaSuccess;
  FP8T_KERNEL_REQUIRE(n_tiles(rows) <= kMaxRowTiles, "rows need more than 65535 tiles of 64 (the grid's y limit)");
  FP8T_KERNEL_REQUIRE(n_tiles(cols) <= kMaxColTiles, "cols need more than 2^31-1 tiles of 64");
  const bool vec = cols % kChunk == 0 && rows % kChunk == 0 && aligned(in, 8) && aligned(out, 8);
  transpose_codes_kernel<<<grid(rows, cols), kThreads, 0, stream>>>(in, rows, cols, out, vec);
  return cudaGetLastError();
}
