// Shared by the CUDA backend's translation units (cuda_backend_cuda.cpp, cuda_norm_cuda.cpp): the
// conversions between LibTorch tensors and the kernels' C API arguments. CUDA builds only.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <string>   // std::string
#include <utility>  // std::move

#include "fp8t_kernels.h"              // FP8T_FORMAT_*
#include "lib/fp8/backends/backend.h"  // Fp8Operand, SlotRef
#include "lib/util/error.h"            // FP8T_CHECK

namespace fp8t {
namespace fp8 {
namespace cuda_args {

// The kernels read fp32 or bf16; anything else (fp16, fp64) is converted to fp32 first.
inline at::Tensor kernel_input(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  const at::Tensor y = (t == at::kFloat || t == at::kBFloat16) ? x : x.to(at::kFloat);
  return y.contiguous();
}

inline int format_code(Format f) { return f == Format::kE4M3 ? FP8T_FORMAT_E4M3 : FP8T_FORMAT_E5M2; }

// A float32 scalar on x's device (slot tensors are views into a recipe's state).
inline float* device_scalar(const at::Tensor& t, const at::Tensor& x, const char* what, const SlotRef& slot) {
  FP8T_CHECK(t.defined() && t.numel() == 1 && t.scalar_type() == at::kFloat && t.device() == x.device(),
             "fp8 slot ", slot.index, ": ", what, " must be a 1-element float32 tensor on ", x.device().str(),
             t.defined() ? ", got one on " + t.device().str() : std::string(", got none"));
  return t.data_ptr<float>();
}

inline Fp8Operand make_operand(at::Tensor codes, const at::Tensor& scale_inv, Format f) {
  Fp8Operand op;
  op.codes = std::move(codes);
  op.scale_inv = scale_inv;
  op.format = f;
  return op;
}

}  // namespace cuda_args
}  // namespace fp8
}  // namespace fp8t
