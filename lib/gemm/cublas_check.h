// The cuBLAS instance of FP8T_STATUS_CHECK (lib/util/status_check.h): cuBLAS is called from
// lib/gemm/ only, so its check lives here.
#pragma once

#include <cublasLt.h>  // cublasStatus_t, cublasLtGetStatusName

#include <string>  // std::string

#include "lib/util/status_check.h"  // FP8T_STATUS_CHECK

namespace fp8t {
namespace gemm {

// "cuBLAS error CUBLAS_STATUS_NOT_SUPPORTED".
inline std::string describe_cublas(cublasStatus_t status) {
  return std::string("cuBLAS error ") + cublasLtGetStatusName(status);
}

}  // namespace gemm
}  // namespace fp8t

// Throws ExitCode::kFailure when `expr` is not CUBLAS_STATUS_SUCCESS:
//   "<context>: cuBLAS error CUBLAS_STATUS_NOT_SUPPORTED from <expr>".
#define FP8T_CUBLAS_CHECK(expr, ...) \
  FP8T_STATUS_CHECK(expr, CUBLAS_STATUS_SUCCESS, ::fp8t::gemm::describe_cublas, __VA_ARGS__)
