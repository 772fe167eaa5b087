// Block-scaled FP8 quantisation (E4M3): 1x128 blocks (activations, gradients) and 128x128 blocks
// (weights), both layouts from ONE read of the high-precision input. Scales: lib/fp8/block_math.h.
//
// Tiling: a block of 256 threads owns a 128x128 tile of x; thread (tr, tc) = (tid / 16, tid % 16)
// holds the 8x8 sub-tile rows 8*tr.. and cols 8*tc.. in registers (8 loads of 8 consecutive
// elements: a half-warp reads one 128-element row segment, coalesced).
//   - rowwise 1x128 amax: max over the 16 lanes of a half-warp (shuffles);
//   - columnwise 1x128 amax: per thread over its 8 rows, the two half-warps of a warp by one
//     shuffle, the 8 warps through shared memory;
//   - 128x128 amax: the whole block.
// Rowwise codes go straight from registers (each half-warp writes a 128-byte row segment).
// Columnwise codes are staged in a 128x128-byte shared tile laid out as the output ([col][row]) and
// written out 16 lanes per output row (128 contiguous bytes). The tile's 8-byte chunks are XOR-
// swizzled (chunk ^ (col / 8)), so that both the 8-byte stores of a half-warp (16 cols of one row
// chunk) and the 8-byte loads (16 chunks of one col) hit 32 distinct banks.
#include <cfloat>  // FLT_MAX

#include "dispatch.cuh"          // dispatch_dtype, dispatch_bool
#include "fp8_device.cuh"        // load_elem, to_fp8x2, abs_bits, warp_max_int
#include "fp8t_block_kernels.h"  // the C API
#include "lib/fp8/block_math.h"  // block_scale_from_amax, block_scale_inv, layouts
#include "packed.cuh"            // Packed, ldg_floats
#include "precondition.cuh"      // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;
namespace fm = fp8t::fp8;

constexpr int kTile = fm::kBlockLen;  // 128
constexpr int kThreads = 256;
constexpr int kSub = 8;                       // a thread's sub-tile is kSub x kSub
constexpr int kLanesPerRow = kTile / kSub;    // 16: a half-warp spans one tile row
constexpr int kWarps = kThreads / 32;
using CodeChunk = Packed<kSub>;  // 8 codes: one 8-byte access

struct Tile {
  int64_t r0, c0;  // first row / col of the tile in x
  int tr, tc;      // this thread's sub-tile (rows 8*tr.., cols 8*tc..)
};

__device__ __forceinline__ Tile this_tile() {
  Tile t;
  t.r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  t.c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  t.tc = threadIdx.x % kLanesPerRow;
  t.tr = threadIdx.x / kLanesPerRow;
  return t;
}

// The thread's 8x8 values; elements outside x read as 0 (they change no amax). vec: 16-byte loads
// (cols % 8 == 0 and x 16-byte aligned, so an 8-element chunk is wholly inside or outside).
template <int kDtype>
__device__ __forceinline__ void load_sub_tile(const void* x, int64_t rows, int64_t cols, const Tile& t, bool vec,
                                              float (&v)[kSub][kSub]) {
  const int64_t col = t.c0 + kSub * t.tc;
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    const int64_t row = t.r0 + kSub * t.tr + i;
    if (vec && row < rows && col < cols) {
      ldg_floats<kDtype>(x, row * cols + col, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < kSub; ++j) v[i][j] = (row < rows && col + j < cols) ? load_elem<kDtype>(x, row * cols + col + j) : 0.0f;
    }
  }
}

template <bool kPow2, int kDtype>
__device__ __forceinline__ float scale_of(int amax_bits) {
  return fm::block_scale_from_amax(__int_as_float(amax_bits), fm::kE4M3Max, kPow2,
                                   fm::block_value_for_inf(kDtype == FP8T_DTYPE_BF16));
}

// 8 codes of fp8(v[k] * s[k]) packed in memory order.
__device__ __forceinline__ CodeChunk encode8(const float (&v)[kSub], const float (&s)[kSub]) {
  uint8_t q[kSub];
#pragma unroll
  for (int k = 0; k < kSub; k += 2) {
    const uint32_t two = to_fp8x2<FP8T_FORMAT_E4M3>(v[k] * s[k], v[k + 1] * s[k + 1]);
    q[k] = static_cast<uint8_t>(two & 0xffu);
    q[k + 1] = static_cast<uint8_t>(two >> 8);
  }
  return CodeChunk::from_bytes(q);
}

// Writes the thread's rows of rowwise codes; row i uses scale s_row[i].
__device__ __forceinline__ void store_rowwise(const float (&v)[kSub][kSub], const float (&s_row)[kSub], uint8_t* out,
                                              int64_t rows, int64_t cols, const Tile& t, bool vec) {
  const int64_t col = t.c0 + kSub * t.tc;
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    const int64_t row = t.r0 + kSub * t.tr + i;
    float s[kSub];
#pragma unroll
    for (int j = 0; j < kSub; ++j) s[j] = s_row[i];
    const CodeChunk q = encode8(v[i], s);
    if (row >= rows || col >= cols) continue;
    if (vec) {
      q.store(out + row * cols + col);
    } else {
      uint8_t b[kSub];
      q.to_bytes(b);
      for (int j = 0; j < kSub && col + j < cols; ++j) out[row * cols + col + j] = b[j];
    }
  }
}

__device__ __forceinline__ int swizzled_chunk(int col_in_tile, int chunk) { return chunk ^ ((col_in_tile >> 3) & 15); }

// Columnwise codes: column j of the sub-tile (8 rows) with scale s_col[j] into the shared tile
// ([col][row], swizzled), then out_t[c0 + c, r0 ..] (out_t is [cols, rows]) 16 lanes per row.
__device__ __forceinline__ void store_columnwise(const float (&v)[kSub][kSub], const float (&s_col)[kSub],
                                                 uint8_t (*tile)[kTile], uint8_t* out_t, int64_t rows,
                                                 int64_t cols, const Tile& t, bool vec) {
#pragma unroll
  for (int j = 0; j < kSub; ++j) {
    float col_v[kSub], s[kSub];
#pragma unroll
    for (int i = 0; i < kSub; ++i) col_v[i] = v[i][j], s[i] = s_col[j];
    const int c = kSub * t.tc + j;
    encode8(col_v, s).store(&tile[c][kSub * swizzled_chunk(c, t.tr)]);
  }
  __syncthreads();
  const int lane16 = threadIdx.x % kLanesPerRow;
#pragma unroll
  for (int p = 0; p < kTile / (kThreads / kLanesPerRow); ++p) {
    const int c = threadIdx.x / kLanesPerRow + p * (kThreads / kLanesPerRow);
    const int64_t orow = t.c0 + c, ocol = t.r0 + kSub * lane16;
    if (orow >= cols || ocol >= rows) continue;
    const CodeChunk q = CodeChunk::load(&tile[c][kSub * swizzled_chunk(c, lane16)]);
    if (vec) {
      q.store(out_t + orow * rows + ocol);
    } else {
      uint8_t b[kSub];
      q.to_bytes(b);
      for (int i = 0; i < kSub && ocol + i < rows; ++i) out_t[orow * rows + ocol + i] = b[i];
    }
  }
}

// Everything a launch needs besides its template choices.
struct BlockArgs {
  const void* x;
  int64_t rows, cols;
  uint8_t* codes_row;
  float* sinv_row;
  uint8_t* codes_col;
  float* sinv_col;
  bool vec_in, vec_row, vec_col;
};

// 1x128: one scale per (row, 128 cols) for the rowwise copy and per (col, 128 rows) for the
// columnwise copy.
template <int kDtype, bool kPow2>
__global__ void __launch_bounds__(kThreads) block_quantize_1x128_kernel(BlockArgs a) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile];
  __shared__ int col_max[kWarps][kTile];
  const Tile t = this_tile();
  float v[kSub][kSub];
  load_sub_tile<kDtype>(a.x, a.rows, a.cols, t, a.vec_in, v);

  if (a.codes_row != nullptr) {
    float s_row[kSub];
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      int m = 0;
#pragma unroll
      for (int j = 0; j < kSub; ++j) m = max(m, abs_bits(v[i][j]));
#pragma unroll
      for (int o = kLanesPerRow / 2; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
      s_row[i] = scale_of<kPow2, kDtype>(m);
      const int64_t row = t.r0 + kSub * t.tr + i;
      const int64_t stride = fm::vec128_scale_stride(a.rows);
      if (t.tc == 0 && row < stride) a.sinv_row[blockIdx.x * stride + row] = row < a.rows ? fm::block_scale_inv(s_row[i]) : 0.0f;
    }
    store_rowwise(v, s_row, a.codes_row, a.rows, a.cols, t, a.vec_row);
  }
  if (a.codes_col != nullptr) {
    int m[kSub];
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      m[j] = 0;
#pragma unroll
      for (int i = 0; i < kSub; ++i) m[j] = max(m[j], abs_bits(v[i][j]));
      m[j] = max(m[j], __shfl_xor_sync(0xffffffffu, m[j], kLanesPerRow));  // the warp's other tr
      if ((threadIdx.x & 31) < kLanesPerRow) col_max[threadIdx.x / 32][kSub * t.tc + j] = m[j];
    }
    __syncthreads();
    float s_col[kSub];
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      int mm = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mm = max(mm, col_max[w][kSub * t.tc + j]);
      s_col[j] = scale_of<kPow2, kDtype>(mm);
      const int64_t col = t.c0 + kSub * t.tc + j;
      const int64_t stride = fm::vec128_scale_stride(a.cols);
      if (t.tr == 0 && col < stride) a.sinv_col[blockIdx.y * stride + col] = col < a.cols ? fm::block_scale_inv(s_col[j]) : 0.0f;
    }
    store_columnwise(v, s_col, tile, a.codes_col, a.rows, a.cols, t, a.vec_col);
  }
}

// Block-wide max of abs bits; the result in every thread.
__device__ __forceinline__ int block_max_int(int v) {
  __shared__ int warp_max[kWarps];
  v = warp_max_int(v);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  int m = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = max(m, warp_max[w]);
  return m;
}

// Thread 0 writes the tile's scale_inv at (rb, cb) of a [n_rb, round_up4(n_cb)] array and, from
// the last tile of a row of tiles, zeros into the padding entries.
__device__ __forceinline__ void write_blk_scale(float* sinv, int64_t rb, int64_t cb, int64_t n_cb, float value) {
  const int64_t stride = fm::round_up4(n_cb);
  sinv[rb * stride + cb] = value;
  if (cb == n_cb - 1) {
    for (int64_t p = n_cb; p < stride; ++p) sinv[rb * stride + p] = 0.0f;
  }
}

// 128x128: one scale per tile, for both layouts.
template <int kDtype, bool kPow2>
__global__ void __launch_bounds__(kThreads) block_quantize_128x128_kernel(BlockArgs a) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile];
  const Tile t = this_tile();
  float v[kSub][kSub];
  load_sub_tile<kDtype>(a.x, a.rows, a.cols, t, a.vec_in, v);
  int m = 0;
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
#pragma unroll
    for (int j = 0; j < kSub; ++j) m = max(m, abs_bits(v[i][j]));
  }
  const float scale = scale_of<kPow2, kDtype>(block_max_int(m));
  float s[kSub];
#pragma unroll
  for (int k = 0; k < kSub; ++k) s[k] = scale;
  if (threadIdx.x == 0) {
    const float sinv = fm::block_scale_inv(scale);
    const int64_t n_rb = fm::ceil_div(a.rows, kTile), n_cb = fm::ceil_div(a.cols, kTile);
    if (a.sinv_row != nullptr) write_blk_scale(a.sinv_row, blockIdx.y, blockIdx.x, n_cb, sinv);
    if (a.sinv_col != nullptr) write_blk_scale(a.sinv_col, blockIdx.x, blockIdx.y, n_rb, sinv);
  }
  if (a.codes_row != nullptr) store_rowwise(v, s, a.codes_row, a.rows, a.cols, t, a.vec_row);
  if (a.codes_col != nullptr) store_columnwise(v, s, tile, a.codes_col, a.rows, a.cols, t, a.vec_col);
}

// ---- launchers --------------------------------------------------------------------------------

constexpr int64_t kMaxRowTiles = 65535;  // gridDim.y

// The checks shared by both launchers; the parameter named fp8t_launcher_ is what
// FP8T_KERNEL_REQUIRE records as the failing launcher.
cudaError_t check_block_args(const char* fp8t_launcher_, const void* x, int x_dtype, int64_t rows, int64_t cols,
                             const uint8_t* codes_row, const float* sinv_row, const uint8_t* codes_col,
                             const float* sinv_col) {
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(rows * cols == 0 || x != nullptr, "no input for a nonempty tensor");
  FP8T_KERNEL_REQUIRE((codes_row == nullptr) == (sinv_row == nullptr), "rowwise codes and scale_inv come together");
  FP8T_KERNEL_REQUIRE((codes_col == nullptr) == (sinv_col == nullptr),
                      "columnwise codes and scale_inv come together");
  FP8T_KERNEL_REQUIRE(fp8t::fp8::ceil_div(rows, kTile) <= kMaxRowTiles,
                      "rows need more than 65535 tiles of 128 (the grid's y limit)");
  FP8T_KERNEL_REQUIRE(fp8t::fp8::ceil_div(cols, kTile) <= 0x7fffffff, "cols need more than 2^31-1 tiles of 128");
  return cudaSuccess;
}

template <typename Kernel>
cudaError_t launch_block(int x_dtype, int power_of_2, const BlockArgs& a, cudaStream_t stream, Kernel kernel_of) {
  if (a.rows * a.cols == 0) return cudaSuccess;  // no block, no scale entry (every padded extent is 0 too)
  const dim3 grid(static_cast<unsigned>(fm::ceil_div(a.cols, kTile)), static_cast<unsigned>(fm::ceil_div(a.rows, kTile)));
  dispatch_dtype(x_dtype, [&](auto dtype) {
    dispatch_bool(power_of_2 != 0, [&](auto pow2) {
      kernel_of(dtype, pow2)<<<grid, kThreads, 0, stream>>>(a);
    });
  });
  return cudaGetLastError();
}

BlockArgs block_args(const void* x, int64_t rows, int64_t cols, uint8_t* codes_row, float* sinv_row,
                     uint8_t* codes_col, float* sinv_col) {
  // Vector accesses need every chunk of 8 wholly inside or outside and aligned row starts.
  const bool vec_in = cols % kSub == 0 && aligned(x, 16);
  const bool vec_row = cols % kSub == 0 && aligned(codes_row, 8);
  const bool vec_col = rows % kSub == 0 && aligned(codes_col, 8);
  return BlockArgs{x, rows, cols, codes_row, sinv_row, codes_col, sinv_col, vec_in, vec_row, vec_col};
}

}  // namespace

extern "C" cudaError_t fp8t_block_quantize_1x128(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                                 int power_of_2, uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                                 uint8_t* codes_columnwise, float* scale_inv_columnwise,
                                                 cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_block_quantize_1x128");
  const cudaError_t st = check_block_args(fp8t_launcher_, x, x_dtype, rows, cols, codes_rowwise, scale_inv_rowwise,
                                          codes_columnwise, scale_inv_columnwise);
  if (st != cudaSuccess) return st;
  const BlockArgs a = block_args(x, rows, cols, codes_rowwise, scale_inv_rowwise, codes_columnwise, scale_inv_columnwise);
  return launch_block(x_dtype, power_of_2, a, stream, [](auto dtype, auto pow2) {
    return block_quantize_1x128_kernel<decltype(dtype)::value, decltype(pow2)::value>;
  });
}

extern "C" cudaError_t fp8t_block_quantize_128x128(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                                   int power_of_2, uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                                   uint8_t* codes_columnwise, float* scale_inv_columnwise,
                                                   cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_block_quantize_128x128");
  const cudaError_t st = check_block_args(fp8t_launcher_, x, x_dtype, rows, cols, codes_rowwise, scale_inv_rowwise,
                                          codes_columnwise, scale_inv_columnwise);
  if (st != cudaSuccess) return st;
  const BlockArgs a = block_args(x, rows, cols, codes_rowwise, scale_inv_rowwise, codes_columnwise, scale_inv_columnwise);
  return launch_block(x_dtype, power_of_2, a, stream, [](auto dtype, auto pow2) {
    return block_quantize_128x128_kernel<decltype(dtype)::value, decltype(pow2)::value>;
  });
}
