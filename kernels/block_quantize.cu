// Block-scaled FP8 quantisation (E4M3): 1x128 blocks (activations, gradients) and 128x128 blocks
// (weights), both layouts from ONE read of the high-precision input, optionally of GELU or the
// GELU backward evaluated on the fly (kernels/activation.cuh, the functions of the per-tensor
// GELU casts) and with dbias. Scales: lib/numerics/block_math.h.
//
// Tiling (kernels/block_tile.cuh): a block of 256 threads owns a 128x128 tile of x; thread (tr, tc)
// = (tid / 16, tid % 16) holds the 8x8 sub-tile rows 8*tr.. and cols 8*tc.. in registers, in the
// input dtype (bf16 pairs stay packed: 32 registers for 64 values, so three blocks fit on an SM).
// One 16-byte load per sub-tile row (a half-warp reads a 256-byte row segment); every load is
// issued first. Phases, separated by __syncthreads:
//   1. amax partials: per thread the max |v| of each of its 8 rows and 8 cols (fmaxf: NaN
//      elements drop out, +-inf counts, as amax_combine); rows to shared memory [row][16 col
//      groups], cols combined over the warp's two row groups by one shuffle, then [warp][col];
//      dbias partial column sums the same way.
//   2. scales: threads 0..127 reduce one row each, threads 128..255 one column each (1x128), or
//      one block-wide max (128x128); each writes its scale to shared memory and its scale_inv to
//      the output grid (consecutive threads, consecutive entries), padding entries as 0.
//   3. codes: rowwise straight from registers (a half-warp writes a 128-byte row segment, 8 bytes
//      per thread); columnwise codes for two rows at a time into a 128x128-byte shared tile laid out
//      as the output ([col][row]) and, after a barrier, out 16 bytes per thread, 8 threads per
//      128-byte output row. The tile's 8-byte chunks are XOR-swizzled (chunk ^ 2 * ((col / 8) % 8)):
//      the 8-byte stores and the 16-byte loads both take the minimum number of bank wavefronts.
// The shared amax partials and the code tile share their memory (phases 1-2 vs 3).
#include <cfloat>  // FLT_MAX

#include "activation.cuh"             // gelu_tanh, gelu_tanh_backward, Act, dispatch_act
#include "block_tile.cuh"             // block::SubTile, load_sub_tile, apply_activation, encode8, Tile
#include "dispatch.cuh"               // dispatch_dtype, IntTag
#include "fp8_device.cuh"             // load_elem, store_elem, round_to_dtype
#include "fp8t_block_kernels.h"       // the C API
#include "lib/numerics/block_math.h"  // block_scale_from_amax, block_scale_inv, layouts
#include "precondition.cuh"           // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;
using namespace fp8t::kern::block;
namespace fm = fp8t::fp8;

// ---- shared memory --------------------------------------------------------------------------

struct Smem {
  union {
    struct {
      float row_part[kTile][kRowPartStride];  // per row: the 16 column groups' max
      float col_part[kWarps][kTile];          // per col: each warp's max (its two row groups)
      float col_sum[kWarps][kTile];           // dbias: each warp's column sum
    } p;
    uint8_t codes[kTile][kTile];  // the columnwise codes, [col][row], swizzled chunks
  };
  float row_scale[kTile], col_scale[kTile];
  int tile_max;  // 128x128
};

// Chunk (8 bytes) position of row chunk `chunk` in the code tile's row `col`.
__device__ __forceinline__ int swizzled_chunk(int col, int chunk) { return chunk ^ (((col >> 3) & 7) << 1); }

// Everything a launch needs besides its template choices.
struct BlockArgs {
  const void* x;
  const void* h;  // kActDgelu: the GELU input
  int64_t rows, cols;
  bool power_of_2;
  uint8_t* codes_row;
  float* sinv_row;
  uint8_t* codes_col;
  float* sinv_col;
  float* dbias_partial;  // [ceil(rows/128), cols] column sums per row tile, or null
  bool vec_in, vec_row, vec_col;
};

template <int kDtype>
__device__ __forceinline__ float scale_of(float amax, bool pow2) {
  return fm::block_scale_from_amax(amax, fm::kE4M3Max, pow2, fm::block_value_for_inf(kDtype == FP8T_DTYPE_BF16));
}

// Phase 1: the thread's row maxima into row_part, its column maxima (and sums) combined with the
// other half-warp into col_part (col_sum). Returns the max over the whole sub-tile.
template <int kDtype>
__device__ __forceinline__ float amax_partials(const SubTile<kDtype>& s, Smem& sm, const Tile& t, bool dbias) {
  float col_m[kSub], col_s[kSub], all = 0.0f;
#pragma unroll
  for (int j = 0; j < kSub; ++j) col_m[j] = 0.0f, col_s[j] = 0.0f;
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      const float v = s.at(i, j), a = fabsf(v);
      m = fmaxf(m, a);
      col_m[j] = fmaxf(col_m[j], a);
      if (dbias) col_s[j] += v;
    }
    sm.p.row_part[kSub * t.tr + i][t.tc] = m;
    all = fmaxf(all, m);
  }
  const bool low_half = (threadIdx.x & 31) < kLanesPerRow;
#pragma unroll
  for (int j = 0; j < kSub; ++j) {
    col_m[j] = fmaxf(col_m[j], __shfl_xor_sync(0xffffffffu, col_m[j], kLanesPerRow));
    if (dbias) {
      // (even row group) + (odd row group), the same sum in both lanes.
      const float other = __shfl_xor_sync(0xffffffffu, col_s[j], kLanesPerRow);
      col_s[j] = low_half ? col_s[j] + other : other + col_s[j];
    }
  }
  if (low_half) {
    float* cm = &sm.p.col_part[threadIdx.x / 32][kSub * t.tc];
    float* cs = &sm.p.col_sum[threadIdx.x / 32][kSub * t.tc];
    reinterpret_cast<float4*>(cm)[0] = make_float4(col_m[0], col_m[1], col_m[2], col_m[3]);
    reinterpret_cast<float4*>(cm)[1] = make_float4(col_m[4], col_m[5], col_m[6], col_m[7]);
    if (dbias) {
      reinterpret_cast<float4*>(cs)[0] = make_float4(col_s[0], col_s[1], col_s[2], col_s[3]);
      reinterpret_cast<float4*>(cs)[1] = make_float4(col_s[4], col_s[5], col_s[6], col_s[7]);
    }
  }
  return all;
}

// Phase 2 (1x128): thread k < 128 makes the scale of tile row k, thread 128 + k that of tile
// column k (and its dbias partial).
template <int kDtype>
__device__ __forceinline__ void scales_1x128(Smem& sm, const BlockArgs& a, const Tile& t) {
  const int k = threadIdx.x % kTile;
  if (threadIdx.x < kTile) {
    float m = 0.0f;
#pragma unroll
    for (int g = 0; g < kLanesPerRow; ++g) m = fmaxf(m, sm.p.row_part[k][g]);
    const float s = scale_of<kDtype>(m, a.power_of_2);
    sm.row_scale[k] = s;
    const int64_t row = t.r0 + k, stride = fm::vec128_scale_stride(a.rows);
    if (a.codes_row != nullptr && row < stride) {
      a.sinv_row[blockIdx.x * stride + row] = row < a.rows ? fm::block_scale_inv(s) : 0.0f;
    }
    return;
  }
  float m = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm.p.col_part[w][k]);
  const float s = scale_of<kDtype>(m, a.power_of_2);
  sm.col_scale[k] = s;
  const int64_t col = t.c0 + k, stride = fm::vec128_scale_stride(a.cols);
  if (a.codes_col != nullptr && col < stride) {
    a.sinv_col[blockIdx.y * stride + col] = col < a.cols ? fm::block_scale_inv(s) : 0.0f;
  }
  if (a.dbias_partial != nullptr && col < a.cols) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sm.p.col_sum[w][k];
    a.dbias_partial[blockIdx.y * a.cols + col] = sum;
  }
}

// Writes the tile's scale_inv at (rb, cb) of a [n_rb, round_up4(n_cb)] array and, from the last
// tile of a row of tiles, zeros into the padding entries.
__device__ __forceinline__ void write_blk_scale(float* sinv, int64_t rb, int64_t cb, int64_t n_cb, float value) {
  const int64_t stride = fm::round_up4(n_cb);
  sinv[rb * stride + cb] = value;
  if (cb == n_cb - 1) {
    for (int64_t p = n_cb; p < stride; ++p) sinv[rb * stride + p] = 0.0f;
  }
}

// Phase 2 (128x128): one scale for the tile, in both grids.
template <int kDtype>
__device__ __forceinline__ void scales_128x128(Smem& sm, const BlockArgs& a, float thread_max) {
  // Non-negative floats order as their bits: an integer atomicMax is the float max.
  if (threadIdx.x == 0) sm.tile_max = 0;
  __syncthreads();
  float m = thread_max;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(&sm.tile_max, __float_as_int(m));
  __syncthreads();
  const float s = scale_of<kDtype>(__int_as_float(sm.tile_max), a.power_of_2);
  if (threadIdx.x < kTile) sm.row_scale[threadIdx.x] = s, sm.col_scale[threadIdx.x] = s;
  if (threadIdx.x == 0) {
    const float sinv = fm::block_scale_inv(s);
    const int64_t n_rb = fm::ceil_div(a.rows, kTile), n_cb = fm::ceil_div(a.cols, kTile);
    if (a.sinv_row != nullptr) write_blk_scale(a.sinv_row, blockIdx.y, blockIdx.x, n_cb, sinv);
    if (a.sinv_col != nullptr) write_blk_scale(a.sinv_col, blockIdx.x, blockIdx.y, n_rb, sinv);
  }
}

// One row of rowwise codes to out[row, col..col+7].
__device__ __forceinline__ void store_row_codes(uint2 q, uint8_t* out, int64_t rows, int64_t cols, int64_t row,
                                                int64_t col, bool vec) {
  if (row >= rows || col >= cols) return;
  if (vec) {
    *reinterpret_cast<uint2*>(out + row * cols + col) = q;
    return;
  }
  for (int j = 0; j < kSub && col + j < cols; ++j) {
    out[row * cols + col + j] = static_cast<uint8_t>((j < 4 ? q.x : q.y) >> (8 * (j % 4)));
  }
}

// Phase 3a: rowwise codes to global memory and columnwise codes into the shared tile, two rows at a
// time (the columnwise codes of rows i, i+1 of a column are one cvt).
template <int kDtype>
__device__ __forceinline__ void encode_sub_tile(const SubTile<kDtype>& s, Smem& sm, const BlockArgs& a, const Tile& t) {
  float rs[kSub], cs[kSub];
#pragma unroll
  for (int k = 0; k < kSub; ++k) rs[k] = sm.row_scale[kSub * t.tr + k], cs[k] = sm.col_scale[kSub * t.tc + k];
  const bool row_out = a.codes_row != nullptr, col_out = a.codes_col != nullptr;
  const int64_t col = t.c0 + kSub * t.tc;
  uint32_t colw[kSub][2];
#pragma unroll
  for (int i = 0; i < kSub; i += 2) {
    float v0[kSub], v1[kSub];
#pragma unroll
    for (int j = 0; j < kSub; ++j) v0[j] = s.at(i, j), v1[j] = s.at(i + 1, j);
    if (row_out) {
      const int64_t row = t.r0 + kSub * t.tr + i;
      store_row_codes(encode8(v0, rs[i]), a.codes_row, a.rows, a.cols, row, col, a.vec_row);
      store_row_codes(encode8(v1, rs[i + 1]), a.codes_row, a.rows, a.cols, row + 1, col, a.vec_row);
    }
    if (col_out) {
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        const uint32_t two = e4m3x2(v0[j] * cs[j], v1[j] * cs[j]);
        if (i % 4 == 0) {
          colw[j][i / 4] = two;
        } else {
          colw[j][i / 4] |= two << 16;
        }
      }
    }
  }
  if (col_out) {
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      const int c = kSub * t.tc + j;
      *reinterpret_cast<uint2*>(&sm.codes[c][kSub * swizzled_chunk(c, t.tr)]) =
          make_uint2(canonical_nan4(colw[j][0]), canonical_nan4(colw[j][1]));
    }
  }
}

// Phase 3b: the shared tile to out_t[c0 + c, r0 ..] (out_t is [cols, rows]), 16 bytes per thread.
__device__ __forceinline__ void store_col_codes(const Smem& sm, const BlockArgs& a, const Tile& t) {
  constexpr int kThreadsPerRow = kTile / 16;               // 8
  constexpr int kRowsPerPass = kThreads / kThreadsPerRow;  // 32
  const int l8 = threadIdx.x % kThreadsPerRow;
#pragma unroll
  for (int p = 0; p < kTile / kRowsPerPass; ++p) {
    const int c = threadIdx.x / kThreadsPerRow + p * kRowsPerPass;
    const int64_t orow = t.c0 + c, ocol = t.r0 + 16 * l8;
    if (orow >= a.cols || ocol >= a.rows) continue;
    // Chunks 2*l8 and 2*l8+1 sit side by side (the swizzle flips bits 1..3 only).
    const uint4 q = *reinterpret_cast<const uint4*>(&sm.codes[c][kSub * swizzled_chunk(c, 2 * l8)]);
    uint8_t* dst = a.codes_col + orow * a.rows + ocol;
    if (a.vec_col) {
      *reinterpret_cast<uint4*>(dst) = q;
    } else {
      const uint32_t w[4] = {q.x, q.y, q.z, q.w};
      for (int k = 0; k < 16 && ocol + k < a.rows; ++k) dst[k] = static_cast<uint8_t>(w[k / 4] >> (8 * (k % 4)));
    }
  }
}

// Blocks per SM the plain bf16 cast is compiled for (80 registers, no spills): the most common
// cast, bandwidth-bound, so more tiles in flight per SM pay. The others are register-bound (fp32
// values, GELU math): two blocks per SM (128 registers) keep them from spilling.
template <int kDtype, int kAct>
constexpr int kMinBlocks = kDtype == FP8T_DTYPE_BF16 && kAct == kActNone ? 3 : 2;

template <int kDtype, int kBlockRows, int kAct>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kDtype, kAct>) block_quantize_kernel(BlockArgs a) {
  __shared__ __align__(16) Smem sm;
  const Tile t = this_tile();
  SubTile<kDtype> s;
  load_sub_tile<kDtype>(s, a.x, a.rows, a.cols, t, a.vec_in);
  if constexpr (kAct == kActDgelu) {
    SubTile<kDtype> h;
    load_sub_tile<kDtype>(h, a.h, a.rows, a.cols, t, a.vec_in);
    apply_activation<kAct>(s, h);
  } else {
    apply_activation<kAct>(s, s);
  }
  const float thread_max = amax_partials<kDtype>(s, sm, t, kBlockRows == 1 && a.dbias_partial != nullptr);
  __syncthreads();
  if constexpr (kBlockRows == 1) {
    scales_1x128<kDtype>(sm, a, t);
  } else {
    scales_128x128<kDtype>(sm, a, thread_max);
  }
  __syncthreads();  // scales ready; the partials are dead, the code tile may overwrite them
  encode_sub_tile<kDtype>(s, sm, a, t);
  if (a.codes_col != nullptr) {
    __syncthreads();
    store_col_codes(sm, a, t);
  }
}

// dbias[c] = sum over row tiles (in order) of partial[tile][c].
__global__ void dbias_reduce_kernel(const float* __restrict__ partial, int64_t n_tiles, int64_t cols,
                                    float* __restrict__ dbias) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int64_t k = 0; k < n_tiles; ++k) s += partial[k * cols + c];
  dbias[c] = s;
}

// out[i] = act(x[i]) (h: the GELU input of the backward), rounded to the dtype: what the fused
// casts quantize.
template <int kDtype, int kAct>
__global__ void activation_values_kernel(const void* x, const void* h, int64_t n, void* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = load_elem<kDtype>(x, i);
    const float g = kAct == kActGelu ? gelu_tanh(v) : gelu_tanh_backward(v, load_elem<kDtype>(h, i));
    store_elem<kDtype>(out, i, round_to_dtype<kDtype>(g));
  }
}

// ---- launchers --------------------------------------------------------------------------------

constexpr int64_t kMaxRowTiles = 65535;  // gridDim.y

struct Request {
  int block_rows, act;
  const void* x;
  const void* h;
  int dtype;
  int64_t rows, cols;
  int power_of_2;
  uint8_t* codes_row;
  float* sinv_row;
  uint8_t* codes_col;
  float* sinv_col;
  float* dbias;
  float* workspace;
};

// The checks of every block cast; the parameter named fp8t_launcher_ is what FP8T_KERNEL_REQUIRE
// records as the failing launcher.
cudaError_t check_request(const char* fp8t_launcher_, const Request& r) {
  FP8T_KERNEL_REQUIRE(r.rows >= 0 && r.cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(r.dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(r.act == kActNone || r.act == kActGelu || r.act == kActDgelu, "unknown activation code");
  FP8T_KERNEL_REQUIRE(r.rows * r.cols == 0 || r.x != nullptr, "no input for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(r.act != kActDgelu || r.rows * r.cols == 0 || r.h != nullptr,
                      "no GELU input for the GELU backward");
  FP8T_KERNEL_REQUIRE((r.codes_row == nullptr) == (r.sinv_row == nullptr), "rowwise codes and scale_inv come together");
  FP8T_KERNEL_REQUIRE((r.codes_col == nullptr) == (r.sinv_col == nullptr),
                      "columnwise codes and scale_inv come together");
  FP8T_KERNEL_REQUIRE(r.dbias == nullptr || r.block_rows == 1, "dbias comes with 1x128 casts only");
  FP8T_KERNEL_REQUIRE(r.dbias == nullptr || r.rows * r.cols == 0 || r.workspace != nullptr,
                      "dbias needs a workspace of fp8t_block_quantize_workspace_bytes");
  FP8T_KERNEL_REQUIRE(r.dbias == nullptr || aligned(r.workspace, 16), "the workspace must be 16-byte aligned");
  FP8T_KERNEL_REQUIRE(r.block_rows == 1 || r.act == kActNone, "activations come with 1x128 casts only");
  FP8T_KERNEL_REQUIRE(fp8t::fp8::ceil_div(r.rows, kTile) <= kMaxRowTiles,
                      "rows need more than 65535 tiles of 128 (the grid's y limit)");
  FP8T_KERNEL_REQUIRE(fp8t::fp8::ceil_div(r.cols, kTile) <= 0x7fffffff, "cols need more than 2^31-1 tiles of 128");
  return cudaSuccess;
}

cudaError_t launch_dbias(const Request& r, cudaStream_t stream) {
  if (r.dbias == nullptr || r.cols == 0) return cudaSuccess;
  if (r.rows == 0) return cudaMemsetAsync(r.dbias, 0, r.cols * sizeof(float), stream);
  constexpr int kReduceThreads = 256;
  const dim3 grid(static_cast<unsigned>(fm::ceil_div(r.cols, kReduceThreads)));
  dbias_reduce_kernel<<<grid, kReduceThreads, 0, stream>>>(r.workspace, fm::ceil_div(r.rows, kTile), r.cols, r.dbias);
  return cudaGetLastError();
}

// The one launcher behind every entry point: checks, then one kernel (and the dbias reduce).
cudaError_t block_quantize(const char* fp8t_launcher_, const Request& r, cudaStream_t stream) {
  const cudaError_t st = check_request(fp8t_launcher_, r);
  if (st != cudaSuccess) return st;
  if (r.rows * r.cols == 0) return launch_dbias(r, stream);  // no block, no scale entry (padded extents are 0 too)
  // Vector accesses need every chunk wholly inside or outside and aligned row starts.
  const bool vec_in = r.cols % kSub == 0 && aligned(r.x, 16) && (r.h == nullptr || aligned(r.h, 16));
  const BlockArgs a{r.x,         r.h,        r.rows,      r.cols,    r.power_of_2 != 0,
                    r.codes_row, r.sinv_row, r.codes_col, r.sinv_col, r.dbias != nullptr ? r.workspace : nullptr,
                    vec_in,      r.cols % kSub == 0 && aligned(r.codes_row, 8),
                    r.rows % 16 == 0 && aligned(r.codes_col, 16)};
  const dim3 grid(static_cast<unsigned>(fm::ceil_div(r.cols, kTile)), static_cast<unsigned>(fm::ceil_div(r.rows, kTile)));
  dispatch_dtype(r.dtype, [&](auto dtype) {
    constexpr int kDtype = decltype(dtype)::value;
    if (r.block_rows != 1) {
      block_quantize_kernel<kDtype, kTile, kActNone><<<grid, kThreads, 0, stream>>>(a);
      return;
    }
    dispatch_act(r.act, [&](auto act) {
      block_quantize_kernel<kDtype, 1, decltype(act)::value><<<grid, kThreads, 0, stream>>>(a);
    });
  });
  const cudaError_t launched = cudaGetLastError();
  return launched != cudaSuccess ? launched : launch_dbias(r, stream);
}

}  // namespace

extern "C" cudaError_t fp8t_block_quantize_1x128(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                                 int power_of_2, uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                                 uint8_t* codes_columnwise, float* scale_inv_columnwise,
                                                 cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_block_quantize_1x128");
  return block_quantize(fp8t_launcher_,
                        Request{1, kActNone, x, nullptr, x_dtype, rows, cols, power_of_2, codes_rowwise,
                                scale_inv_rowwise, codes_columnwise, scale_inv_columnwise, nullptr, nullptr},
                        stream);
}

extern "C" cudaError_t fp8t_block_quantize_128x128(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                                   int power_of_2, uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                                   uint8_t* codes_columnwise, float* scale_inv_columnwise,
                                                   cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_block_quantize_128x128");
  return block_quantize(fp8t_launcher_,
                        Request{kTile, kActNone, x, nullptr, x_dtype, rows, cols, power_of_2, codes_rowwise,
                                scale_inv_rowwise, codes_columnwise, scale_inv_columnwise, nullptr, nullptr},
                        stream);
}

extern "C" size_t fp8t_block_quantize_workspace_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<size_t>(fm::ceil_div(rows, kTile) * cols) * sizeof(float);
}

extern "C" cudaError_t fp8t_block_quantize_act(int act, const void* x, const void* h, int dtype, int64_t rows,
                                               int64_t cols, int power_of_2, uint8_t* codes_rowwise,
                                               float* scale_inv_rowwise, uint8_t* codes_columnwise,
                                               float* scale_inv_columnwise, float* dbias, void* workspace,
                                               cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_block_quantize_act");
  return block_quantize(fp8t_launcher_,
                        Request{1, act, x, h, dtype, rows, cols, power_of_2, codes_rowwise, scale_inv_rowwise,
                                codes_columnwise, scale_inv_columnwise, dbias, static_cast<float*>(workspace)},
                        stream);
}

extern "C" cudaError_t fp8t_activation_values(int act, const void* x, const void* h, int dtype, int64_t n,
                                              void* out, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_activation_values");
  FP8T_KERNEL_REQUIRE(n >= 0, "n is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype), "the dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(act == kActGelu || act == kActDgelu, "the activation is not GELU or its backward");
  FP8T_KERNEL_REQUIRE(n == 0 || (x != nullptr && out != nullptr), "no input or output for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(act != kActDgelu || n == 0 || h != nullptr, "no GELU input for the GELU backward");
  if (n == 0) return cudaSuccess;
  constexpr int kValueThreads = 256;
  const int64_t blocks = fm::ceil_div(n, kValueThreads);
  const dim3 grid(static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
  dispatch_dtype(dtype, [&](auto d) {
    dispatch_act(act, [&](auto a) {
      constexpr int kAct = decltype(a)::value;
      if constexpr (kAct != kActNone) {
        activation_values_kernel<decltype(d)::value, kAct><<<grid, kValueThreads, 0, stream>>>(x, h, n, out);
      }
    });
  });
  return cudaGetLastError();
}
