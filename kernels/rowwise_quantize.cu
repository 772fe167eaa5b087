// Row-wise FP8 quantisation (E4M3, one scale per row of a GEMM operand; scales:
// lib/numerics/rowwise_math.h).
//
// Rowwise copy: one block of 256 threads per row: a strided pass finds the row's amax (abs bits,
// NaN as 0, as amax_combine), one block reduction, every thread computes the row's scale, a second
// strided pass writes the codes. Columnwise copy (the transposed tensor, one scale per column of
// x): a column-amax pass (each thread one column over a chunk of rows, one atomicMax per column
// and chunk), then a cast-transpose over 32x32 tiles through shared memory, so that both the
// reads of x and the writes of the transposed codes are row segments.
#include <algorithm>  // std::max

#include "dispatch.cuh"                 // dispatch_dtype
#include "fp8_device.cuh"               // load_elem, abs_bits, warp_max_int, to_fp8
#include "fp8t_rowwise_kernels.h"       // the C API
#include "lib/numerics/rowwise_math.h"  // row_scale_from_amax, block_scale_inv
#include "precondition.cuh"             // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

namespace {

using namespace fp8t::kern;
namespace fm = fp8t::fp8;

constexpr int kRowThreads = 256;
constexpr int kTile = 32;        // cast-transpose tile: 32x32 values
constexpr int kTileRows = 8;     // threads per tile column: 32 x 8 threads, 4 values each
constexpr int kAmaxChunk = 256;  // rows per thread in the column-amax pass

template <int kDtype>
__device__ __forceinline__ float scale_of(int amax_bits) {
  return fm::row_scale_from_amax(__int_as_float(amax_bits), kDtype == FP8T_DTYPE_BF16);
}

// The block-wide max of v (abs bits), valid in every thread. blockDim.x == kRowThreads.
__device__ __forceinline__ int block_max_int(int v) {
  __shared__ int warp_max[kRowThreads / 32];
  v = warp_max_int(v);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < kRowThreads / 32 ? warp_max[threadIdx.x] : 0;
  if (threadIdx.x < 32) v = warp_max_int(v);
  __shared__ int result;
  if (threadIdx.x == 0) result = v;
  __syncthreads();
  return result;
}

template <int kDtype>
__global__ void __launch_bounds__(kRowThreads) rowwise_kernel(const void* x, int64_t cols, uint8_t* codes,
                                                              float* scale_inv) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  int m = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) m = max(m, abs_bits(load_elem<kDtype>(x, base + c)));
  const float scale = scale_of<kDtype>(block_max_int(m));
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    codes[base + c] = to_fp8<FP8T_FORMAT_E4M3>(load_elem<kDtype>(x, base + c) * scale);
  }
  if (threadIdx.x == 0) scale_inv[blockIdx.x] = fm::block_scale_inv(scale);
}

// grid (ceil(cols / 256), ceil(rows / kAmaxChunk)): thread = one column over one chunk of rows.
template <int kDtype>
__global__ void column_amax_kernel(const void* x, int64_t rows, int64_t cols, int* column_amax) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kAmaxChunk;
  const int64_t r1 = min(rows, r0 + kAmaxChunk);
  int m = 0;
  for (int64_t r = r0; r < r1; ++r) m = max(m, abs_bits(load_elem<kDtype>(x, r * cols + c)));
  if (m > 0) atomicMax(column_amax + c, m);
}

// grid (ceil(cols / 32), ceil(rows / 32)), block (32, 8): the tile's values cast with their
// column's scale into shared memory [col][row], then written as rows of the transposed codes.
template <int kDtype>
__global__ void columnwise_cast_kernel(const void* x, int64_t rows, int64_t cols, const int* column_amax,
                                       uint8_t* codes, float* scale_inv) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile, r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c = c0 + threadIdx.x;
  const float scale = c < cols ? scale_of<kDtype>(column_amax[c]) : 1.0f;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i;
    if (r < rows && c < cols) {
      tile[threadIdx.x][i] = to_fp8<FP8T_FORMAT_E4M3>(load_elem<kDtype>(x, r * cols + c) * scale);
    }
  }
  if (blockIdx.y == 0 && threadIdx.y == 0 && c < cols) scale_inv[c] = fm::block_scale_inv(scale);
  __syncthreads();
  const int64_t r = r0 + threadIdx.x;  // the output's column
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t oc = c0 + i;  // the output's row (a column of x)
    if (oc < cols && r < rows) codes[oc * rows + r] = tile[i][threadIdx.x];
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

extern "C" cudaError_t fp8t_rowwise_quantize(const void* x, int x_dtype, int64_t rows, int64_t cols, uint8_t* codes,
                                             float* scale_inv, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_rowwise_quantize");
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(rows <= 0x7fffffff, "more than 2^31 - 1 rows");
  if (rows == 0) return cudaSuccess;
  FP8T_KERNEL_REQUIRE(x != nullptr && codes != nullptr && scale_inv != nullptr, "a null pointer");
  dispatch_dtype(x_dtype, [&](auto d) {
    constexpr int kD = decltype(d)::value;
    rowwise_kernel<kD><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, cols, codes, scale_inv);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t fp8t_columnwise_quantize(const void* x, int x_dtype, int64_t rows, int64_t cols,
                                                uint8_t* codes, float* scale_inv, int* column_amax,
                                                cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_columnwise_quantize");
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(ceil_div(rows, kTile) <= 65535 && ceil_div(rows, kAmaxChunk) <= 65535, "too many rows");
  if (cols == 0) return cudaSuccess;
  FP8T_KERNEL_REQUIRE(x != nullptr && codes != nullptr && scale_inv != nullptr && column_amax != nullptr,
                      "a null pointer");
  dispatch_dtype(x_dtype, [&](auto d) {
    constexpr int kD = decltype(d)::value;
    if (rows > 0) {
      const dim3 amax_grid(static_cast<unsigned>(ceil_div(cols, 256)),
                           static_cast<unsigned>(ceil_div(rows, kAmaxChunk)));
      column_amax_kernel<kD><<<amax_grid, 256, 0, stream>>>(x, rows, cols, column_amax);
    }
    const dim3 grid(static_cast<unsigned>(ceil_div(cols, kTile)),
                    static_cast<unsigned>(std::max<int64_t>(1, ceil_div(rows, kTile))));
    columnwise_cast_kernel<kD>
        <<<grid, dim3(kTile, kTileRows), 0, stream>>>(x, rows, cols, column_amax, codes, scale_inv);
  });
  return cudaGetLastError();
}
