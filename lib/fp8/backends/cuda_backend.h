// The CUDA FP8 backend (lib/fp8/backends/cuda_backend_cuda.cpp): kernels/ casts and norms, lib/gemm/
// cuBLASLt GEMMs. Available only in builds with FP8T_WITH_CUDA.
#pragma once

#include "lib/fp8/backends/backend.h"  // Backend

namespace fp8t {
namespace fp8 {

Backend& cuda_backend();

}  // namespace fp8
}  // namespace fp8t
