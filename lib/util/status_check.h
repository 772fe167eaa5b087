// Status checks of CUDA-side libraries that throw fp8t::Error (lib/util/error.h) with file:line,
// a caller-supplied context (which op, which shape) and what the status says. One shape of check,
// FP8T_STATUS_CHECK, instantiated for the CUDA runtime here, for cuBLAS in lib/gemm/cublas_check.h
// and for the kernels/ launchers in lib/util/cuda_tensors.h.
//
// CUDA-only (FP8T_WITH_CUDA builds): lib/gemm/ and the *_cuda.cpp files include it.
#pragma once

#include <cuda_runtime.h>  // cudaError_t, cudaGetErrorName, cudaGetErrorString

#include <string>  // std::string

#include "lib/util/error.h"  // fp8t::Error, FP8T_THROW

// Throws ExitCode::kFailure when `expr` does not evaluate to `ok`:
//   "<context>: <describe(status)> from <expr>".
// `describe` maps the status to text; the context (the variadic part) is only built on failure.
#define FP8T_STATUS_CHECK(expr, ok, describe, ...)                                             \
  do {                                                                                         \
    const auto fp8t_status_ = (expr);                                                          \
    if (fp8t_status_ != (ok)) {                                                                \
      FP8T_THROW(::fp8t::ExitCode::kFailure, ::fp8t::detail::concat(__VA_ARGS__), ": ",       \
                 describe(fp8t_status_), " from ", #expr);                                     \
    }                                                                                          \
  } while (0)

namespace fp8t {
namespace detail {

// "CUDA error cudaErrorInvalidValue (invalid argument)".
inline std::string describe_cuda(cudaError_t status) {
  return concat("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

}  // namespace detail
}  // namespace fp8t

// Throws ExitCode::kFailure when `expr` is not cudaSuccess:
//   "<context>: CUDA error cudaErrorInvalidValue (invalid argument) from <expr>".
#define FP8T_CUDA_CHECK(expr, ...) FP8T_STATUS_CHECK(expr, cudaSuccess, ::fp8t::detail::describe_cuda, __VA_ARGS__)
