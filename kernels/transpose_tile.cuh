// The 128x64 tile scheme of the cast+transpose kernels without dbias (kernels/cast_transpose.cu,
// cast_transpose_tiled_kernel, and the code transpose of fp8t_transpose_codes; the bf16 SwiGLU
// casts of kernels/swiglu_cast.cu): built to run at memory bandwidth, GELU and its backward
// included.
//
// A block of 256 threads loops over 128x64 tiles (grid-stride over four waves of blocks), with the
// next tile's loads issued before the current tile is processed. Thread (tg, tc) owns 4
// consecutive rows (4*tg .. 4*tg+3) x 8 columns (8*tc ..): one 16-byte load per row (bf16; two for
// fp32), one 8-byte rowwise store per row, and, after a byte transpose in registers (PRMT), one
// 4-byte column word (the 4 rows' codes of one column) per column into shared memory. The store
// phase reads 16-byte segments (16 rows of one column) back and writes them with 16-byte stores:
// 8 consecutive threads write the 128 bytes of one transposed row. The word of (column c, row group
// tg) lives at c*32 + (((tg/4) ^ (c/8)) * 4 + tg%4): the XOR keeps both the column-word stores
// and the 16-byte loads free of bank conflicts without padding. Two shared buffers alternate, so
// each tile needs one __syncthreads.
//
// Compared with the 64x64 scheme of cast_tile.cuh (still used with dbias, whose summation order
// the fused SwiGLU backward with dbias shares): 4x fewer shared-memory instructions (words instead of bytes),
// 16-byte transposed stores, one amax atomic per block instead of per tile, and loads in flight
// while a tile is computed.
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <math.h>          // fabsf, fmaxf
#include <stddef.h>        // size_t
#include <stdint.h>        // uint8_t, uint32_t, int64_t

#include "fp8_device.cuh"         // bf16_bits_to_float, float_to_bf16_bits, load_elem
#include "fp8t_kernels.h"         // FP8T_DTYPE_*, FP8T_FORMAT_*
#include "launch.cuh"             // kern::resident_blocks
#include "lib/numerics/format.h"  // fp8::encode_e4m3 / encode_e5m2 (pre-sm_89 fallback)
#include "packed.cuh"             // Packed128, elem_bytes

namespace fp8t {
namespace kern {
namespace ttile {

constexpr int kRows = 128;  // tile rows
constexpr int kCols = 64;   // tile columns
constexpr int kThreads = 256;
constexpr int kChunk = 8;                                 // columns per thread
constexpr int kRowsPerThread = 4;                         // rows per thread: one 4-byte column word
constexpr int kColChunks = kCols / kChunk;                // 8
constexpr int kRowGroups = kRows / kRowsPerThread;        // 32
constexpr int kWordsPerCol = kRows / 4;                   // one transposed tile row: 32 words
constexpr int kSegments = kRows / 16;                     // 16-byte segments per transposed row: 8
constexpr int kSegmentsPerThread = kCols * kSegments / kThreads;  // 2
static_assert(kColChunks * kRowGroups == kThreads, "one thread per (row group, column chunk)");
static_assert(kColChunks == 8 && kSegments == 8, "the XOR swizzle assumes 8 column chunks and 8 segments");

inline int64_t n_row_tiles(int64_t rows) { return (rows + kRows - 1) / kRows; }
inline int64_t n_col_tiles(int64_t cols) { return (cols + kCols - 1) / kCols; }

// 32-bit words of one thread's 8 elements of one row (bf16: 4, fp32: 8).
template <int kDtype>
constexpr int words_per_row() {
  return kChunk * elem_bytes<kDtype>() / 4;
}

// One thread's raw input of one tile: 4 rows x 8 elements, as loaded (bits, not yet floats).
template <int kDtype>
struct RawRows {
  uint32_t w[kRowsPerThread][words_per_row<kDtype>()];
};

// Loads x[row0 + rr, col .. col + 7] for rr < 4 of a [rows, cols] view whose rows are `ld`
// elements apart. fast: the whole tile is in bounds and every row start is 16-byte aligned
// (16-byte loads); else bounds-checked element loads, with 0 bits (+0.0) for the elements outside
// the tensor.
template <int kDtype>
__device__ __forceinline__ void load_rows(const void* x, int64_t ld, int64_t rows, int64_t cols, int64_t row0,
                                          int64_t col, bool fast, RawRows<kDtype>& r) {
  constexpr int kWords = words_per_row<kDtype>();
  const char* base = static_cast<const char*>(x);
  if (fast) {
#pragma unroll
    for (int rr = 0; rr < kRowsPerThread; ++rr) {
#pragma unroll
      for (int i = 0; i < kWords / 4; ++i) {
        const Packed128 q = Packed128::ldg(base + ((row0 + rr) * ld + col) * elem_bytes<kDtype>() + 16 * i);
#pragma unroll
        for (int k = 0; k < 4; ++k) r.w[rr][4 * i + k] = q.w[k];
      }
    }
    return;
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerThread; ++rr) {
#pragma unroll
    for (int k = 0; k < kWords; ++k) r.w[rr][k] = 0u;
    const int64_t row = row0 + rr;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      if (row >= rows || col + j >= cols) continue;
      if constexpr (kDtype == FP8T_DTYPE_F32) {
        r.w[rr][j] = __float_as_uint(load_elem<kDtype>(x, row * ld + col + j));
      } else {
        const uint32_t b = static_cast<const uint16_t*>(x)[row * ld + col + j];
        r.w[rr][j / 2] |= (j % 2 == 0) ? b : (b << 16);
      }
    }
  }
}

// The 8 elements of row rr as floats (bf16 -> float is exact).
template <int kDtype>
__device__ __forceinline__ void unpack_row(const RawRows<kDtype>& r, int rr, float (&v)[kChunk]) {
#pragma unroll
  for (int k = 0; k < words_per_row<kDtype>(); ++k) {
    if constexpr (kDtype == FP8T_DTYPE_F32) {
      v[k] = __uint_as_float(r.w[rr][k]);
    } else {
      v[2 * k] = __uint_as_float(r.w[rr][k] << 16);
      v[2 * k + 1] = __uint_as_float(r.w[rr][k] & 0xffff0000u);
    }
  }
}

// a and b rounded to bf16 and back (round to nearest even, subnormals kept: the value
// round_to_dtype gives for every non-NaN input; a NaN stays a NaN) in one conversion instruction.
__device__ __forceinline__ void round_pair_bf16(float& a, float& b) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));  // a -> low half, b -> high half
  a = __uint_as_float(d << 16);
  b = __uint_as_float(d & 0xffff0000u);
#else
  a = bf16_bits_to_float(float_to_bf16_bits(a));
  b = bf16_bits_to_float(float_to_bf16_bits(b));
#endif
}

// The values rounded to the input dtype (what the unfused operator would have stored).
template <int kDtype>
__device__ __forceinline__ void round_row(float (&v)[kChunk]) {
  if constexpr (kDtype != FP8T_DTYPE_F32) {
#pragma unroll
    for (int j = 0; j < kChunk; j += 2) round_pair_bf16(v[j], v[j + 1]);
  }
}

// max(a, b), NaN if either is NaN (max.NaN): one instruction that is both the amax and the NaN test.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  return (a != a || b != b) ? a + b : fmaxf(a, b);
#endif
}

// Codes of 4 values (byte k = value k). NaN inputs give the hardware's NaN code; the caller
// replaces it by format.h's 0x7F (fix_nan_codes), as to_fp8x2 does.
template <int kFormat>
__device__ __forceinline__ uint32_t fp8x4(float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  uint16_t lo, hi;
  if constexpr (kFormat == FP8T_FORMAT_E4M3) {
    asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;}\n" : "=h"(lo) : "f"(a), "f"(b));
    asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;}\n" : "=h"(hi) : "f"(c), "f"(d));
  } else {
    asm("{cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;}\n" : "=h"(lo) : "f"(a), "f"(b));
    asm("{cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;}\n" : "=h"(hi) : "f"(c), "f"(d));
  }
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
#else
  auto enc = [](float v) -> uint32_t {
    return kFormat == FP8T_FORMAT_E4M3 ? fp8::encode_e4m3(v) : fp8::encode_e5m2(v);
  };
  return enc(a) | (enc(b) << 8) | (enc(c) << 16) | (enc(d) << 24);
#endif
}

// The slow path of a row holding a NaN (rare): format.h's NaN code 0x7F for each NaN element, and
// the row's amax without the NaNs (abs_bits counts a NaN as 0).
__device__ __forceinline__ float fix_nan_codes(const float (&v)[kChunk], uint32_t (&codes)[2]) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    const int shift = 8 * (j % 4);
    if (v[j] != v[j]) {
      codes[j / 4] = (codes[j / 4] & ~(0xffu << shift)) | (0x7fu << shift);
    } else {
      m = fmaxf(m, fabsf(v[j]));
    }
  }
  return m;
}

// Codes of one row's 8 values times scale into codes[0] (columns 0..3) and codes[1] (4..7).
// Returns max |v|, or NaN when the row holds a NaN: then the caller repairs the row with
// fix_nan_codes (one test per tile keeps the common path free of branches).
template <int kFormat>
__device__ __forceinline__ float encode_row(const float (&v)[kChunk], float scale, uint32_t (&codes)[2]) {
  codes[0] = fp8x4<kFormat>(v[0] * scale, v[1] * scale, v[2] * scale, v[3] * scale);
  codes[1] = fp8x4<kFormat>(v[4] * scale, v[5] * scale, v[6] * scale, v[7] * scale);
  float m = fabsf(v[0]);
#pragma unroll
  for (int j = 1; j < kChunk; ++j) m = max_nan(m, fabsf(v[j]));
  return m;
}

// Byte transpose of a 4x4 block: in[r] holds row r's codes of 4 columns (byte k = column k);
// out[k] holds column k's codes of the 4 rows (byte r = row r).
__device__ __forceinline__ void transpose4x4(uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3, uint32_t* out) {
  const uint32_t a01 = __byte_perm(r0, r1, 0x5140);  // r0.0 r1.0 r0.1 r1.1
  const uint32_t b01 = __byte_perm(r0, r1, 0x7362);  // r0.2 r1.2 r0.3 r1.3
  const uint32_t a23 = __byte_perm(r2, r3, 0x5140);
  const uint32_t b23 = __byte_perm(r2, r3, 0x7362);
  out[0] = __byte_perm(a01, a23, 0x5410);
  out[1] = __byte_perm(a01, a23, 0x7632);
  out[2] = __byte_perm(b01, b23, 0x5410);
  out[3] = __byte_perm(b01, b23, 0x7632);
}

// Index in a shared tile (uint32 words) of column c's word for row group tg.
__device__ __forceinline__ int word_index(int c, int tg) {
  return c * kWordsPerCol + ((((tg >> 2) ^ (c >> 3)) << 2) | (tg & 3));
}

// Index of column c's 16-byte segment s (rows 16*s .. 16*s+15), in words.
__device__ __forceinline__ int segment_index(int c, int s) { return c * kWordsPerCol + ((s ^ (c >> 3)) << 2); }

// The rowwise codes of row `row`, columns col .. col+7 (out is [rows, cols], rows `ld` bytes apart).
__device__ __forceinline__ void store_row(const uint32_t (&codes)[2], uint8_t* out, int64_t ld, int64_t rows,
                                          int64_t cols, int64_t row, int64_t col, bool fast) {
  if (fast) {
    *reinterpret_cast<uint2*>(out + row * ld + col) = make_uint2(codes[0], codes[1]);
  } else if (row < rows) {
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      if (col + j < cols) out[row * ld + col + j] = static_cast<uint8_t>(codes[j / 4] >> (8 * (j % 4)));
    }
  }
}

// Store phase: the block's shared tile (codes of x[r0 .., c0 ..]) to out_t[c0 + c, r0 + r]
// (out_t is [cols, rows]).
__device__ __forceinline__ void store_transposed(const uint32_t* words, uint8_t* out_t, int64_t rows, int64_t cols,
                                                 int64_t r0, int64_t c0, bool fast) {
#pragma unroll
  for (int p = 0; p < kSegmentsPerThread; ++p) {
    const int q = threadIdx.x + p * kThreads;
    const int c = q / kSegments, s = q % kSegments;
    const uint4 seg = *reinterpret_cast<const uint4*>(words + segment_index(c, s));
    const int64_t orow = c0 + c, ocol = r0 + 16 * s;
    if (fast) {
      *reinterpret_cast<uint4*>(out_t + orow * rows + ocol) = seg;
    } else if (orow < cols) {
      const uint32_t w[4] = {seg.x, seg.y, seg.z, seg.w};
#pragma unroll
      for (int b = 0; b < 16; ++b) {
        if (ocol + b < rows) out_t[orow * rows + ocol + b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
      }
    }
  }
}

// Where a tile lies; tiles are numbered row-major over [row tiles, column tiles].
struct TilePos {
  int64_t r0, c0;
  bool full;  // whole 128x64 tile in bounds
};

// The first row and the first column of the thread's 4 rows x 8 columns in tile p.
__device__ __forceinline__ int64_t thread_row0(const TilePos& p) {
  return p.r0 + kRowsPerThread * (threadIdx.x / kColChunks);
}
__device__ __forceinline__ int64_t thread_col(const TilePos& p) { return p.c0 + kChunk * (threadIdx.x % kColChunks); }

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
    p.r0 = tr * kRows;
    p.c0 = tc * kCols;
    p.full = p.r0 + kRows <= rows && p.c0 + kCols <= cols;
    return p;
  }
};

// The thread's column words of the tile into the shared buffer `words`.
__device__ __forceinline__ void stage_columns(const uint32_t (&codes)[kRowsPerThread][2], uint32_t* words) {
  const int tc = threadIdx.x % kColChunks, tg = threadIdx.x / kColChunks;
  uint32_t colw[kChunk];
  transpose4x4(codes[0][0], codes[1][0], codes[2][0], codes[3][0], colw);
  transpose4x4(codes[0][1], codes[1][1], codes[2][1], codes[3][1], colw + 4);
#pragma unroll
  for (int j = 0; j < kChunk; ++j) words[word_index(kChunk * tc + j, tg)] = colw[j];
}

// ---- launch geometry (host) ------------------------------------------------------------------

// Blocks of the tiled kernel `kKernel` that fit on the current device at once (kernels/launch.cuh),
// with `dynamic_smem` bytes of dynamic shared memory per block.
template <auto kKernel>
int64_t resident_blocks(size_t dynamic_smem = 0) {
  return kern::resident_blocks<kKernel>(kThreads, dynamic_smem);
}

// Waves of resident blocks per launch. Each block walks a fixed share of the tiles, so a launch
// lasts as long as its last wave: with one wave, a few SMs held by another stream's kernels (the
// NCCL kernels that overlap the backward under DDP) would push a whole block's share into a
// second wave (up to 2x the time); with four, such a straggler wave is a quarter as long. The
// cost is three more block start-ups per SM slot (a first tile loaded without overlap).
constexpr int64_t kWaves = 4;

// The tiled grid over [rows, cols]: row and column tiles (0 and 1 for an empty tensor, which walks
// no tile and divides by no zero) and the number of blocks: at most `waves` waves of `resident`.
struct TiledGrid {
  int64_t row_tiles, col_tiles, blocks;
};

inline TiledGrid tiled_grid(int64_t rows, int64_t cols, int64_t resident, int64_t waves = kWaves) {
  const int64_t n_tiles = n_row_tiles(rows) * n_col_tiles(cols);
  TiledGrid g;
  g.row_tiles = n_tiles == 0 ? 0 : n_row_tiles(rows);
  g.col_tiles = n_tiles == 0 ? 1 : n_col_tiles(cols);
  const int64_t cap = waves * resident;
  g.blocks = n_tiles < 1 ? 1 : (n_tiles < cap ? n_tiles : cap);
  return g;
}

}  // namespace ttile
}  // namespace kern
}  // namespace fp8t
