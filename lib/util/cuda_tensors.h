// Small helpers of the files that hand LibTorch CUDA tensors to kernels/ (the *_cuda.cpp files):
// the current stream of a tensor's device, tensor options on that device, and the kernels' dtype
// code. CUDA builds only.
#pragma once

#include <ATen/ATen.h>              // at::Tensor
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include "fp8t_kernels.h"  // FP8T_DTYPE_*

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

}  // namespace cuda
}  // namespace fp8t
