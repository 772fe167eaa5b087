// The 64x64 tile scheme of the cast+transpose kernels with dbias (kernels/cast_transpose.cu's
// cast_transpose_kernel, and the fused SwiGLU casts of kernels/swiglu_cast.cu with dbias, which
// share its dbias order, or with fp32 inputs): one read of the high-precision input writes the
// rowwise FP8 codes and, through a shared-memory tile, the columnwise codes. (Without dbias,
// cast_transpose.cu and the bf16 SwiGLU casts run the faster 128x64 scheme of
// kernels/transpose_tile.cuh.)
//
// A block of 256 threads owns a 64x64 tile. Load phase: thread (tr, tc) handles 8 consecutive
// elements of rows tr and tr+32 (16/32-byte loads), writes their codes rowwise (one 8-byte store
// per row) and into a shared tile. Store phase (store_transposed): thread (oc, tr8) gathers 8
// codes of column oc (rows 8*tr8 .. 8*tr8+7) from the shared tile and writes them with one 8-byte
// store into the transposed output. Gradients also get dbias = column sums in FP32: per tile,
// each thread adds its two rows, then one thread per column adds the 32 row-group sums in a fixed
// order, then dbias_reduce_kernel adds the tiles in order (deterministic, no atomics).
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <cuda_runtime.h>  // dim3, cudaStream_t
#include <stdint.h>        // uint8_t, int64_t

#include "fp8_device.cuh"  // load_elem
#include "packed.cuh"      // Packed, ldg_floats

namespace fp8t {
namespace kern {
namespace tile {

constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kChunk = 8;                               // elements per thread per row
constexpr int kChunksPerRow = kTile / kChunk;           // 8 threads cover one tile row
constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // 32
using CodeChunk = Packed<kChunk>;                       // the codes of one chunk: one 8-byte access
// 65-byte rows: in the store phase a warp reads byte (8*t + j, oc..oc+3) for t = 0..7, i.e.
// word 130*t + const, bank 2*t + const: 8 threads x up to 2 words = 16 distinct banks.
constexpr int kTileStride = kTile + 1;
constexpr int kSumStride = kTile + 1;  // float partial sums [32][65]: 2-way at worst

// The grid of 64x64 tiles: x over column tiles, y over row tiles. Launchers first check
// kMaxRowTiles / kMaxColTiles.
constexpr int64_t kMaxRowTiles = 65535;  // gridDim.y
constexpr int64_t kMaxColTiles = 0x7fffffff;

inline int64_t n_tiles(int64_t extent) { return (extent + kTile - 1) / kTile; }

inline dim3 grid(int64_t rows, int64_t cols) {
  const int64_t gx = n_tiles(cols), gy = n_tiles(rows);
  return dim3(static_cast<unsigned>(gx < 1 ? 1 : gx), static_cast<unsigned>(gy < 1 ? 1 : gy));
}

struct Geom {
  int64_t r0, c0;
  bool full;  // whole 64x64 tile in bounds
};

__device__ __forceinline__ Geom geom(int64_t rows, int64_t cols) {
  Geom g;
  g.r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  g.c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  g.full = g.r0 + kTile <= rows && g.c0 + kTile <= cols;
  return g;
}

// Loads x[row, col..col+7] of a [rows, cols] view whose rows are `ld` elements apart; vector
// loads when `vec`, else bounds-checked scalars (missing elements read as 0, which leaves amax
// and sums unchanged).
template <int kDtype>
__device__ __forceinline__ void load_chunk(const void* x, int64_t ld, int64_t rows, int64_t cols, int64_t row,
                                           int64_t col, bool vec, float (&v)[kChunk]) {
  const int64_t base = row * ld + col;
  if (vec) {
    ldg_floats<kDtype>(x, base, v);
  } else {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      v[j] = (row < rows && col + j < cols) ? load_elem<kDtype>(x, base + j) : 0.0f;
    }
  }
}

// Stores the codes of x[row, col..col+7] into out[rows, cols] (rows `ld` bytes apart).
__device__ __forceinline__ void store_chunk(const uint8_t (&q)[kChunk], uint8_t* out, int64_t ld, int64_t rows,
                                            int64_t cols, int64_t row, int64_t col, bool vec) {
  if (vec) {
    CodeChunk::from_bytes(q).store(out + row * ld + col);
  } else if (row < rows) {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      if (col + j < cols) out[row * ld + col + j] = q[j];
    }
  }
}

// Store phase: the block's shared tile (codes of x[r0.., c0..]) goes to out_t[c0 + oc, r0 + r]
// (out_t is [cols, rows]).
__device__ __forceinline__ void store_transposed(const uint8_t (*t)[kTileStride], uint8_t* out_t, int64_t rows,
                                                 int64_t cols, const Geom& g, bool vec) {
  const int tr8 = threadIdx.x % kChunksPerRow;  // rows 8*tr8 .. 8*tr8+7 of the tile
#pragma unroll
  for (int pass = 0; pass < kTile / kRowsPerPass; ++pass) {
    const int oc = threadIdx.x / kChunksPerRow + pass * kRowsPerPass;
    uint8_t b[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) b[j] = t[kChunk * tr8 + j][oc];
    const int64_t orow = g.c0 + oc;
    const int64_t ocol = g.r0 + kChunk * tr8;
    if (g.full && vec) {
      CodeChunk::from_bytes(b).store(out_t + orow * rows + ocol);
    } else if (orow < cols) {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        if (ocol + j < rows) out_t[orow * rows + ocol + j] = b[j];
      }
    }
  }
}

// One thread per tile column (threadIdx.x < kTile) adds the 32 row-group sums in a fixed order
// and writes the tile's partial column sum: partial[blockIdx.y][c0 + c] (partial rows are
// `ld` floats apart).
__device__ __forceinline__ void write_partial_sums(const float (*sums)[kSumStride], float* partial, int64_t ld,
                                                   int64_t rows, int64_t cols, const Geom& g, int c) {
  if (g.r0 >= rows || g.c0 + c >= cols) return;
  float s = 0.0f;
  for (int i = 0; i < kRowsPerPass; ++i) s += sums[i][c];
  partial[static_cast<int64_t>(blockIdx.y) * ld + g.c0 + c] = s;
}

// dbias[c] = sum over row tiles t (in order) of partial[t][c], from the per-tile partial sums
// [n_tiles(rows), cols] (zeros for rows = 0). kernels/cast_tile.cu.
cudaError_t reduce_dbias(const float* partial, int64_t rows, int64_t cols, float* dbias, cudaStream_t stream);

}  // namespace tile
}  // namespace kern
}  // namespace fp8t
