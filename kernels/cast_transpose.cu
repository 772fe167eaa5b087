// Cast + transpose: one read of x[rows, cols] writes the rowwise FP8 codes [rows, cols] and the
// columnwise codes [cols, rows] (what dgrad/wgrad need on Hopper, docs/fp8-formats.md),
// with the fused amax and, for gradients, dbias = column sums in FP32 (TE's bgrad_quantize).
// Two kernels: without dbias the 128x64 tiled kernel built for memory bandwidth
// (kernels/transpose_tile.cuh); with dbias the 64x64 kernel of kernels/cast_tile.cuh, whose
// summation order the fused SwiGLU backward (kernels/swiglu_cast.cu) shares bit for bit.
#include <algorithm>  // std::min, std::max

#include "activation.cuh"     // gelu_tanh, gelu_tanh_backward, Act, dispatch_act
#include "cast_tile.cuh"      // tile::*, load_chunk, store_chunk, store_transposed, reduce_dbias
#include "transpose_tile.cuh" // ttile::*: the tiled kernel's loads, encoding and transposed stores
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

// ---- the tiled kernel (no dbias; kernels/transpose_tile.cuh) ----------------------------------

// One thread's inputs of one tile: x, and for the GELU backward h (else unused and dropped).
template <int kDtype>
struct TileInputs {
  ttile::RawRows<kDtype> x;
  ttile::RawRows<kDtype> h;
};

// Where a tile lies; tiles are numbered row-major over [row tiles, column tiles].
struct TilePos {
  int64_t r0, c0;
  bool full;  // whole 128x64 tile in bounds
};

// A block's walk over the tiles blockIdx.x, blockIdx.x + gridDim.x, ...: the tile coordinates are
// advanced by adding (no 64-bit division per tile).
struct TileWalk {
  int64_t tr, tc;              // current tile (row tile, column tile)
  int64_t step_r, step_c;      // gridDim.x as (row tiles, column tiles)
  int64_t col_tiles, row_tiles;

  __device__ __forceinline__ TileWalk(int64_t rows_tiles, int64_t cols_tiles)
      : tr(blockIdx.x / cols_tiles), tc(blockIdx.x % cols_tiles), step_r(gridDim.x / cols_tiles),
        step_c(gridDim.x % cols_tiles), col_tiles(cols_tiles), row_tiles(rows_tiles) {}

  __device__ __forceinline__ bool valid() const { return tr < row_tiles; }

  __device__ __forceinline__ TileWalk next() const {
    TileWalk w = *this;
    w.tc += step_c;
    w.tr += step_r;
    if (w.tc >= col_tiles) {
      w.tc -= col_tiles;
      ++w.tr;
    }
    return w;
  }

  __device__ __forceinline__ TilePos pos(int64_t rows, int64_t cols) const {
    TilePos p;
    p.r0 = tr * ttile::kRows;
    p.c0 = tc * ttile::kCols;
    p.full = p.r0 + ttile::kRows <= rows && p.c0 + ttile::kCols <= cols;
    return p;
  }
};

template <int kDtype, int kAct>
__device__ __forceinline__ void load_tile(const void* x, const void* h, int64_t rows, int64_t cols, const TilePos& p,
                                          bool vec, TileInputs<kDtype>& in) {
  const int64_t row0 = p.r0 + ttile::kRowsPerThread * (threadIdx.x / ttile::kColChunks);
  const int64_t col = p.c0 + ttile::kChunk * (threadIdx.x % ttile::kColChunks);
  ttile::load_rows<kDtype>(x, rows, cols, row0, col, vec && p.full, in.x);
  if constexpr (kAct == kActDgelu) ttile::load_rows<kDtype>(h, rows, cols, row0, col, vec && p.full, in.h);
}

// The 8 values the cast sees in row rr of the thread: x, gelu(x) or dy * gelu'(h), the
// activations rounded to the input dtype (as load8_act).
template <int kDtype, int kAct>
__device__ __forceinline__ void row_values(const TileInputs<kDtype>& in, int rr, float (&v)[ttile::kChunk]) {
  ttile::unpack_row<kDtype>(in.x, rr, v);
  if constexpr (kAct == kActGelu) {
#pragma unroll
    for (int j = 0; j < ttile::kChunk; ++j) v[j] = gelu_tanh(v[j]);
    ttile::round_row<kDtype>(v);
  } else if constexpr (kAct == kActDgelu) {
    float hv[ttile::kChunk];
    ttile::unpack_row<kDtype>(in.h, rr, hv);
#pragma unroll
    for (int j = 0; j < ttile::kChunk; ++j) v[j] = gelu_tanh_backward(v[j], hv[j]);
    ttile::round_row<kDtype>(v);
  }
}

// Encodes the thread's 4 rows of the current tile, stores them rowwise and returns their amax.
template <int kDtype, int kFormat, int kAct>
__device__ __forceinline__ float encode_tile(const TileInputs<kDtype>& in, float scale, uint8_t* out_row,
                                             int64_t rows, int64_t cols, const TilePos& p, bool fast,
                                             uint32_t (&codes)[ttile::kRowsPerThread][2]) {
  const int64_t row0 = p.r0 + ttile::kRowsPerThread * (threadIdx.x / ttile::kColChunks);
  const int64_t col = p.c0 + ttile::kChunk * (threadIdx.x % ttile::kColChunks);
  float m = 0.0f;
#pragma unroll
  for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
    float v[ttile::kChunk];
    row_values<kDtype, kAct>(in, rr, v);
    m = fmaxf(m, ttile::encode_row<kFormat>(v, scale, codes[rr]));
    if (out_row != nullptr) ttile::store_row(codes[rr], out_row, rows, cols, row0 + rr, col, fast);
  }
  return m;
}

// The thread's column words of the tile into the shared buffer `words`.
__device__ __forceinline__ void stage_columns(const uint32_t (&codes)[ttile::kRowsPerThread][2], uint32_t* words) {
  const int tc = threadIdx.x % ttile::kColChunks, tg = threadIdx.x / ttile::kColChunks;
  uint32_t colw[ttile::kChunk];
  ttile::transpose4x4(codes[0][0], codes[1][0], codes[2][0], codes[3][0], colw);
  ttile::transpose4x4(codes[0][1], codes[1][1], codes[2][1], codes[3][1], colw + 4);
#pragma unroll
  for (int j = 0; j < ttile::kChunk; ++j) words[ttile::word_index(ttile::kChunk * tc + j, tg)] = colw[j];
}

// Blocks per SM the register budget is cut for (__launch_bounds__): the most without spills
// (nvcc 13, sm_90a), so that 64-96 KB of loads per SM are in flight.
constexpr int tiled_min_blocks(int dtype, int act) {
  return dtype == FP8T_DTYPE_F32 ? (act == kActDgelu ? 2 : 3) : (act == kActDgelu ? 3 : 4);
}

// Grid-stride over the tiles; the next tile's loads are issued before the current tile is
// encoded (except fp32 GELU backward, whose two inputs would double an already large register
// set). amax: one atomic per block.
template <int kDtype, int kFormat, int kAct>
__global__ void __launch_bounds__(ttile::kThreads, tiled_min_blocks(kDtype, kAct))
    cast_transpose_tiled_kernel(const void* __restrict__ x, const void* __restrict__ h, int64_t rows, int64_t cols,
                                int64_t row_tiles, int64_t col_tiles, const float* __restrict__ scale_ptr,
                                uint8_t* __restrict__ out_row, uint8_t* __restrict__ out_col, float* amax,
                                float* scale_inv_out, bool vec) {
  constexpr bool kPrefetch = kDtype != FP8T_DTYPE_F32 || kAct != kActDgelu;
  __shared__ __align__(16) uint32_t words[2][ttile::kCols * ttile::kWordsPerCol];
  const float scale = *scale_ptr;
  if (blockIdx.x == 0 && threadIdx.x == 0 && scale_inv_out != nullptr) *scale_inv_out = 1.0f / scale;

  float m = 0.0f;
  int buf = 0;
  TileInputs<kDtype> cur, next;
  TileWalk w(row_tiles, col_tiles);
  if (w.valid()) load_tile<kDtype, kAct>(x, h, rows, cols, w.pos(rows, cols), vec, cur);
  for (; w.valid(); w = w.next()) {
    const TilePos p = w.pos(rows, cols);
    const TileWalk wn = w.next();
    if constexpr (kPrefetch) {
      if (wn.valid()) load_tile<kDtype, kAct>(x, h, rows, cols, wn.pos(rows, cols), vec, next);
    }
    const bool fast = vec && p.full;
    uint32_t codes[ttile::kRowsPerThread][2];
    m = fmaxf(m, encode_tile<kDtype, kFormat, kAct>(cur, scale, out_row, rows, cols, p, fast, codes));
    if (out_col != nullptr) {
      stage_columns(codes, words[buf]);
      __syncthreads();  // the other buffer's readers finished before the previous tile's barrier
      ttile::store_transposed(words[buf], out_col, rows, cols, p.r0, p.c0, fast);
      buf ^= 1;
    }
    if constexpr (kPrefetch) {
      cur = next;
    } else if (wn.valid()) {
      load_tile<kDtype, kAct>(x, h, rows, cols, wn.pos(rows, cols), vec, cur);
    }
  }
  block_amax_commit(__float_as_int(m), amax);
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

// The 64x64 kernel, with dbias (its only use).
void launch_cast_transpose_dbias(int act, int x_dtype, int fp8_format, cudaStream_t stream, const CastArgs& a) {
  dispatch_act(act, [&](auto act_tag) {
    dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
      cast_transpose_kernel<decltype(dtype)::value, decltype(format)::value, true, decltype(act_tag)::value>
          <<<grid(a.rows, a.cols), kThreads, 0, stream>>>(a.x, a.h, a.rows, a.cols, a.scale, a.out_row, a.out_col,
                                                          a.amax, a.scale_inv_out, a.partial, a.vec);
    });
  });
}

// Blocks of the tiled kernel <kDtype, kFormat, kAct> that fit on the current device at once: its
// grid (one wave; each block loops over tiles). The per-SM count depends only on the
// instantiation (registers, shared memory), so it is asked once per instantiation.
template <int kDtype, int kFormat, int kAct>
int64_t resident_blocks() {
  static const int per_sm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, cast_transpose_tiled_kernel<kDtype, kFormat, kAct>,
                                                      ttile::kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // not the launch's error: fall back to one block per SM
      n = 1;
    }
    return n < 1 ? 1 : n;
  }();
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    sms = 1;
  }
  return static_cast<int64_t>(per_sm) * (sms < 1 ? 1 : sms);
}

// The tiled kernel (no dbias). Its vector path also needs 16-byte transposed stores: rows a
// multiple of 16 and the columnwise output 16-byte aligned.
void launch_cast_transpose_tiled(int act, int x_dtype, int fp8_format, cudaStream_t stream, const CastArgs& a) {
  const bool vec = a.vec && a.rows % 16 == 0 && (a.out_col == nullptr || aligned(a.out_col, 16));
  const int64_t n_tiles = ttile::n_row_tiles(a.rows) * ttile::n_col_tiles(a.cols);
  // An empty tensor walks no tile (and divides by no zero column tiles).
  const int64_t row_tiles = n_tiles == 0 ? 0 : ttile::n_row_tiles(a.rows);
  const int64_t col_tiles = n_tiles == 0 ? 1 : ttile::n_col_tiles(a.cols);
  dispatch_act(act, [&](auto act_tag) {
    dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
      constexpr int kDtype = decltype(dtype)::value, kFormat = decltype(format)::value;
      constexpr int kAct = decltype(act_tag)::value;
      const int64_t blocks = std::min(std::max<int64_t>(n_tiles, 1), resident_blocks<kDtype, kFormat, kAct>());
      cast_transpose_tiled_kernel<kDtype, kFormat, kAct><<<static_cast<unsigned>(blocks), ttile::kThreads, 0, stream>>>(
          a.x, a.h, a.rows, a.cols, row_tiles, col_tiles, a.scale, a.out_row, a.out_col, a.amax, a.scale_inv_out, vec);
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
  if (want_dbias) {
    launch_cast_transpose_dbias(act, x_dtype, fp8_format, stream, args);
  } else {
    launch_cast_transpose_tiled(act, x_dtype, fp8_format, stream, args);
  }
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
