// Small helpers of the files that hand LibTorch CUDA tensors to kernels/ (the *_cuda.cpp files):
// the current stream of a tensor's device, tensor options on that device, the kernels' dtype
// code, and the check of a launcher's status (FP8T_KERNEL_CHECK). CUDA builds only.
#pragma once

#include <ATen/ATen.h>              // at::Tensor
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <string>  // std::string

#include "fp8t_kernels.h"           // FP8T_DTYPE_*, fp8t_last_precondition
#include "lib/util/status_check.h"  // FP8T_STATUS_CHECK, describe_cuda

namespace fp8t {
namespace cuda {

inline cudaStream_t stream_of(const at::Tensor& t) {
  return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

inline at::TensorOptions bytes_on(const at::Tensor& t) {
  return at::TensorOptions().dtype(at::kByte).device(t.device());
}

inline at::TensorOptions floats_on(const at::Tensor& t) {
  return at::TensorOptions().dtype(at::kFloat).device(t.device());
}

// The kernels' element type code of an fp32 or bf16 tensor (callers convert other types first).
inline int dtype_code(const at::Tensor& x) { return x.scalar_type() == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16; }

// What a kernels/ launcher's status means: the precondition it names when it refused the call
// ("precondition failed: fp8t_cast_transpose: rows need ... (failed check: ...)"), else the CUDA
// error.
inline std::string describe_kernel_status(cudaError_t status) {
  const char* failed = fp8t_last_precondition();
  if (status == cudaErrorInvalidValue && failed[0] != '\0') return std::string("precondition failed: ") + failed;
  return ::fp8t::detail::describe_cuda(status);
}

}  // namespace cuda
}  // namespace fp8t

// Checks the status of a kernels/ launcher call `expr`; on failure throws ExitCode::kFailure with
// the context (name the op and the tensor shapes in it) and the failed precondition:
//   "fp8 cast+transpose of 4194305x1 (slot 3): precondition failed: fp8t_cast_transpose: rows need
//    more than 65535 tiles of 64 (...) (failed check: ...) from fp8t_cast_transpose(...)".
#define FP8T_KERNEL_CHECK(expr, ...) \
  FP8T_STATUS_CHECK(expr, cudaSuccess, ::fp8t::cuda::describe_kernel_status, __VA_ARGS__)
