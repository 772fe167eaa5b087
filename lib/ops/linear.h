// The plain model's Linear, y = x Wᵀ + b, with its weight gradient in FP32 from the GEMM.
//
// Under CUDA autocast (bf16 or fp16 runs, and layers an FP8 run leaves in high precision) the
// unconverted at::linear computes the weight gradient as a 16-bit GEMM output and then widens it
// to the FP32 weight's dtype: one rounding of dW to 16 bits and a conversion pass over every
// weight each step. Here the wgrad GEMM writes FP32 itself (at::mm with an FP32 out_dtype, FP32
// accumulation as before), so dW is the GEMM's FP32 sum, rounded once, and the conversion pass
// is gone. The forward and dgrad are autocast's: x and W cast to the autocast dtype, the same
// GEMMs. Elsewhere (CPU, no autocast, a 16-bit weight, no gradient) it is at::linear.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t {
namespace ops {

// True when linear() takes the FP32-wgrad path for these arguments: x on CUDA, CUDA autocast on
// with bf16 or fp16, a float32 weight, and autograd recording.
bool linear_fp32_wgrad(const at::Tensor& x, const at::Tensor& weight);

// y = x Wᵀ + b over the last dim of x (weight [out, in], bias [out] or undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ops
}  // namespace fp8t
