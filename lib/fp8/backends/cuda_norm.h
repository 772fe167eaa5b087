// The norms of the CUDA backend (CudaBackend's norm_forward, add_norm_forward, norm_backward,
// add_norm_backward; the Backend interface in backend.h documents them): launches of kernels/norm_*.cu
// with their outputs allocated on the input's device, on the current LibTorch CUDA stream.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include "lib/fp8/backends/backend.h"  // NormForwardResult, NormBackwardResult, SlotRef

namespace fp8t {
namespace fp8 {

NormForwardResult cuda_norm_forward(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, double eps,
                                    bool rms, const SlotRef* slot, bool write_y, const at::Tensor& y_amax);
NormForwardResult cuda_add_norm_forward(const at::Tensor& x, const at::Tensor& h, const at::Tensor& gamma,
                                        const at::Tensor& beta, double eps, bool rms, const SlotRef* slot,
                                        bool write_y, const at::Tensor& y_amax);
NormBackwardResult cuda_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& gamma,
                                      const at::Tensor& beta, const at::Tensor& mean, const at::Tensor& rstd, bool rms);
NormBackwardResult cuda_add_norm_backward(const at::Tensor& dy, const at::Tensor& dr, const at::Tensor& r,
                                          const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mean,
                                          const at::Tensor& rstd, bool rms, at::ScalarType h_dtype);

}  // namespace fp8
}  // namespace fp8t
