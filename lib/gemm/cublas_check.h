// CUDA runtime and cuBLAS status checks that throw fp8t::Error (lib/util/error.h) with the
// status name, file:line and a caller-supplied context (which GEMM, which shape).
//
// CUDA-only (FP8T_WITH_CUDA builds); used by lib/gemm/ and the CUDA FP8 backend.
#pragma once

#include <cublasLt.h>      // cublasStatus_t, cublasLtGetStatusName
#include <cuda_runtime.h>  // cudaError_t, cudaGetErrorName

#include "lib/util/error.h"  // fp8t::Error, FP8T_THROW

// Throws ExitCode::kFailure when `expr` is not cudaSuccess:
//   "<context>: CUDA error cudaErrorInvalidValue (invalid argument) from <expr>".
#define FP8T_CUDA_CHECK(expr, ...)                                                              \
  do {                                                                                          \
    const cudaError_t fp8t_status_ = (expr);                                                    \
    if (fp8t_status_ != cudaSuccess) {                                                          \
      FP8T_THROW(::fp8t::ExitCode::kFailure, ::fp8t::detail::concat(__VA_ARGS__),              \
                 ": CUDA error ", cudaGetErrorName(fp8t_status_), " (",                         \
                 cudaGetErrorString(fp8t_status_), ") from ", #expr);                           \
    }                                                                                           \
  } while (0)

// Throws ExitCode::kFailure when `expr` is not CUBLAS_STATUS_SUCCESS:
//   "<context>: cuBLAS error CUBLAS_STATUS_NOT_SUPPORTED from <expr>".
#define FP8T_CUBLAS_CHECK(expr, ...)                                                            \
  do {                                                                                          \
    const cublasStatus_t fp8t_status_ = (expr);                                                 \
    if (fp8t_status_ != CUBLAS_STATUS_SUCCESS) {                                                \
      FP8T_THROW(::fp8t::ExitCode::kFailure, ::fp8t::detail::concat(__VA_ARGS__),              \
                 ": cuBLAS error ", cublasLtGetStatusName(fp8t_status_), " from ", #expr);      \
    }                                                                                           \
  } while (0)
