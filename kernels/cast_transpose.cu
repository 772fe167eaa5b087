// Cast + transpose: one read of x[rows, cols] writes the rowwise FP8 codes [rows, cols] and the
// columnwise codes [cols, rows] (what dgrad/wgrad need on Hopper, docs/fp8-formats.md),
// with the fused amax and, for gradients, dbias = column sums in FP32 (TE's bgrad_quantize).
// Two kernels: without dbias the 128x64 tiled kernel built for memory bandwidth
// (kernels/transpose_tile.cuh; also the byte transpose of fp8t_transpose_codes); with dbias the
// 64x64 kernel of kernels/cast_tile.cuh, whose summation order the fused SwiGLU backward
// (kernels/swiglu_cast.cu) shares bit for bit.

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

template <int kDtype, int kAct>
__device__ __forceinline__ void load_tile(const void* x, const void* h, int64_t rows, int64_t cols,
                                          const ttile::TilePos& p,
                                          bool vec, TileInputs<kDtype>& in) {
  const int64_t row0 = ttile::thread_row0(p);
  const int64_t col = ttile::thread_col(p);
  ttile::load_rows<kDtype>(x, cols, rows, cols, row0, col, vec && p.full, in.x);
  if constexpr (kAct == kActDgelu) ttile::load_rows<kDtype>(h, cols, rows, cols, row0, col, vec && p.full, in.h);
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
// A NaN makes a row's max NaN (rare); then the row's codes and amax are repaired. For the bf16
// activations (issue-bound: about 30 and 38 instructions per element) the test is made once per
// tile, after all 4 rows, and the values are evaluated again for the repair: one basic block of
// 32 independent elements for the scheduler. Elsewhere it is made per row (no re-evaluation and
// fewer live registers: the per-tile form spills there at the register budget).
template <int kDtype, int kFormat, int kAct>
__device__ __forceinline__ float encode_tile(const TileInputs<kDtype>& in, float scale, uint8_t* out_row,
                                             int64_t rows, int64_t cols, const ttile::TilePos& p, bool fast,
                                             uint32_t (&codes)[ttile::kRowsPerThread][2]) {
  constexpr bool kTileNanTest = kAct != kActNone && kDtype != FP8T_DTYPE_F32;
  float m = 0.0f;
#pragma unroll
  for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
    float v[ttile::kChunk];
    row_values<kDtype, kAct>(in, rr, v);
    const float row_max = ttile::encode_row<kFormat>(v, scale, codes[rr]);
    if constexpr (kTileNanTest) {
      m = ttile::max_nan(m, row_max);
    } else {
      m = fmaxf(m, row_max == row_max ? row_max : ttile::fix_nan_codes(v, codes[rr]));
    }
  }
  if (kTileNanTest && m != m) {
    m = 0.0f;
#pragma unroll
    for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
      float v[ttile::kChunk];
      row_values<kDtype, kAct>(in, rr, v);
      m = fmaxf(m, ttile::fix_nan_codes(v, codes[rr]));
    }
  }
  if (out_row != nullptr) {
    const int64_t row0 = ttile::thread_row0(p);
    const int64_t col = ttile::thread_col(p);
#pragma unroll
    for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
      ttile::store_row(codes[rr], out_row, cols, rows, cols, row0 + rr, col, fast);
    }
  }
  return m;
}

// Blocks per SM the register budget is cut for (__launch_bounds__): the most without spills
// (nvcc 13, sm_90a), so that 64-96 KB of loads per SM are in flight.
constexpr int tiled_min_blocks(int dtype, int act) {
  return dtype == FP8T_DTYPE_F32 ? (act == kActDgelu ? 2 : 3) : (act == kActDgelu ? 3 : 4);
}

// Grid-stride over the tiles; the next tile's loads are issued before the current tile is
// encoded (except fp32 GELU backward, whose two inputs would double an already large register
// set). amax: one atomic per block. (Unrolling the loop twice to swap the input buffers instead
// of copying them made nvcc 13 spill at these register budgets.)
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
  ttile::TileWalk w(row_tiles, col_tiles);
  if (w.valid()) load_tile<kDtype, kAct>(x, h, rows, cols, w.pos(rows, cols), vec, cur);
  for (; w.valid(); w = w.next()) {
    const ttile::TilePos p = w.pos(rows, cols);
    const ttile::TileWalk wn = w.next();
    if constexpr (kPrefetch) {
      if (wn.valid()) load_tile<kDtype, kAct>(x, h, rows, cols, wn.pos(rows, cols), vec, next);
    }
    const bool fast = vec && p.full;
    uint32_t codes[ttile::kRowsPerThread][2];
    m = fmaxf(m, encode_tile<kDtype, kFormat, kAct>(cur, scale, out_row, rows, cols, p, fast, codes));
    if (out_col != nullptr) {
      ttile::stage_columns(codes, words[buf]);
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

// One thread's codes of one tile of an FP8 code matrix: 4 rows x 8 bytes (8-byte loads on the
// vector path, else bounds-checked bytes with 0 outside).
__device__ __forceinline__ void load_code_rows(const uint8_t* in, int64_t rows, int64_t cols, const ttile::TilePos& p,
                                               bool vec, uint32_t (&c)[ttile::kRowsPerThread][2]) {
  const int64_t row0 = ttile::thread_row0(p);
  const int64_t col = ttile::thread_col(p);
#pragma unroll
  for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) {
    const int64_t row = row0 + rr;
    if (vec && p.full) {
      const uint2 q = __ldg(reinterpret_cast<const uint2*>(in + row * cols + col));
      c[rr][0] = q.x, c[rr][1] = q.y;
      continue;
    }
    c[rr][0] = c[rr][1] = 0u;
#pragma unroll
    for (int j = 0; j < ttile::kChunk; ++j) {
      if (row < rows && col + j < cols) {
        c[rr][j / 4] |= static_cast<uint32_t>(in[row * cols + col + j]) << (8 * (j % 4));
      }
    }
  }
}

// fp8t_transpose_codes: the tiled kernel's walk and transposed stores for codes that exist already.
__global__ void __launch_bounds__(ttile::kThreads, 4)
    transpose_codes_kernel(const uint8_t* __restrict__ in, int64_t rows, int64_t cols, int64_t row_tiles,
                           int64_t col_tiles, uint8_t* __restrict__ out, bool vec) {
  __shared__ __align__(16) uint32_t words[2][ttile::kCols * ttile::kWordsPerCol];
  int buf = 0;
  uint32_t cur[ttile::kRowsPerThread][2], next[ttile::kRowsPerThread][2];
  ttile::TileWalk w(row_tiles, col_tiles);
  if (w.valid()) load_code_rows(in, rows, cols, w.pos(rows, cols), vec, cur);
  for (; w.valid(); w = w.next()) {
    const ttile::TilePos p = w.pos(rows, cols);
    const ttile::TileWalk wn = w.next();
    if (wn.valid()) load_code_rows(in, rows, cols, wn.pos(rows, cols), vec, next);
    ttile::stage_columns(cur, words[buf]);
    __syncthreads();  // as in cast_transpose_tiled_kernel
    ttile::store_transposed(words[buf], out, rows, cols, p.r0, p.c0, vec && p.full);
    buf ^= 1;
#pragma unroll
    for (int rr = 0; rr < ttile::kRowsPerThread; ++rr) cur[rr][0] = next[rr][0], cur[rr][1] = next[rr][1];
  }
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

// The tiled kernel (no dbias). Its vector path also needs 16-byte transposed stores: rows a
// multiple of 16 and the columnwise output 16-byte aligned.
void launch_cast_transpose_tiled(int act, int x_dtype, int fp8_format, cudaStream_t stream, const CastArgs& a) {
  const bool vec = a.vec && a.rows % 16 == 0 && (a.out_col == nullptr || aligned(a.out_col, 16));
  dispatch_act(act, [&](auto act_tag) {
    dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
      constexpr auto kKernel = cast_transpose_tiled_kernel<decltype(dtype)::value, decltype(format)::value,
                                                           decltype(act_tag)::value>;
      const ttile::TiledGrid g = ttile::tiled_grid(a.rows, a.cols, ttile::resident_blocks<kKernel>());
      kKernel<<<static_cast<unsigned>(g.blocks), ttile::kThreads, 0, stream>>>(
          a.x, a.h, a.rows, a.cols, g.row_tiles, g.col_tiles, a.scale, a.out_row, a.out_col, a.amax,
          a.scale_inv_out, vec);
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
  // 8-byte loads of each row's 8-code chunks, 16-byte stores of each transposed row's 16-code segments.
  const bool vec = cols % 8 == 0 && rows % 16 == 0 && aligned(in, 8) && aligned(out, 16);
  const ttile::TiledGrid g = ttile::tiled_grid(rows, cols, ttile::resident_blocks<transpose_codes_kernel>());
  transpose_codes_kernel<<<static_cast<unsigned>(g.blocks), ttile::kThreads, 0, stream>>>(
      in, rows, cols, g.row_tiles, g.col_tiles, out, vec);
  return cudaGetLastError();
}
