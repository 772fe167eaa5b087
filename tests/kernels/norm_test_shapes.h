// The norm kernels' test shapes and epsilon, shared by test_norm.cpp (kernels/norm_*.cu through
// CudaBackend, lib/fp8/backends/cuda_norm_cuda.cpp) and test_norm_add.cpp (the fused residual add, also
// through ops::add_norm, lib/ops/add_norm_cuda.cpp).
#pragma once

#include <cstdint>  // int64_t
#include <utility>  // std::pair
#include <vector>   // std::vector

namespace fp8t {
namespace test {

inline constexpr double kNormEps = 1e-5;

// rows x cols: tiny, TE odd shapes, GPT widths (multiples of 256 take the vectorized kernels:
// 256 one warp, 4096 512 threads; 1100 rows are more than the backward's 528 blocks, so blocks
// walk several rows and load the next one ahead), 16, 160 and 3000 the scalar kernels (3000: 8
// columns per thread), a row too wide for the backward's registers (5000) and one too wide for
// the forward's (20000) -> the re-reading paths.
inline const std::vector<std::pair<int64_t, int64_t>>& norm_test_shapes() {
  static const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 16},   {60, 160}, {217, 256}, {64, 768},  {48, 2048},
      {5, 4096}, {1100, 512}, {9, 3000}, {33, 5000}, {6, 20000}};
  return shapes;
}

}  // namespace test
}  // namespace fp8t
