// The second launch of a cast with dbias (kernels/cast_tile.cuh): the per-tile column sums added
// in tile order.
#include "cast_tile.cuh"  // reduce_dbias

namespace fp8t {
namespace kern {
namespace tile {

namespace {

__global__ void dbias_reduce_kernel(const float* __restrict__ partial, int n_row_tiles, int64_t cols,
                                    float* __restrict__ dbias) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int t = 0; t < n_row_tiles; ++t) s += partial[t * cols + c];
  dbias[c] = s;
}

}  // namespace

cudaError_t reduce_dbias(const float* partial, int64_t rows, int64_t cols, float* dbias, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) return cudaMemsetAsync(dbias, 0, cols * sizeof(float), stream);
  constexpr int kReduceThreads = 256;
  const dim3 rgrid(static_cast<unsigned>((cols + kReduceThreads - 1) / kReduceThreads));
  dbias_reduce_kernel<<<rgrid, kReduceThreads, 0, stream>>>(partial, static_cast<int>(n_tiles(rows)), cols, dbias);
  return cudaGetLastError();
}

}  // namespace tile
}  // namespace kern
}  // namespace fp8t
