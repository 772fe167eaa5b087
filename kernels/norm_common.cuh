// What the norm forward (kernels/norm_forward.cu) and backward (kernels/norm_backward.cu) both
// use: the branch dtype of a plain norm, the columns per thread of the vectorized kernels, and the
// launch policy that selects a kernel instance. The two directions are separate translation units
// because they share no kernel, only these few names.
//
// Everything here is in an anonymous namespace: each including translation unit gets its own
// copy, so nothing becomes a symbol of the kernels library.
// Only included by kernels/norm_*.cu (nvcc); no LibTorch.
#pragma once

#include "fp8_device.cuh"  // namespace fp8t::kern, whose helpers both directions call unqualified

namespace {

using namespace fp8t::kern;

// The branch dtype of a plain norm (no residual add).
constexpr int kNoBranch = -1;

// Columns per thread of the vectorized kernels (norm_forward_vec_kernel, norm_backward_vec_kernel):
// one 16-byte access of bf16, two of fp32.
constexpr int kVecCols = 8;

// Threads per block and columns per thread (0: the row does not fit in registers).
struct NormPolicy {
  int threads;
  int per;
};

// NormPolicy::per of the vectorized kernels (kVecCols per thread).
constexpr int kVecPolicy = -kVecCols;

}  // namespace
