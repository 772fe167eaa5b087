// The unfused SwiGLU as LibTorch ops: the CPU emulation of the fused SwiGLU casts
// (materialize() in backend.cpp, Backend::quantize_unfused of the SwiGLU sources).
// swiglu_value is the model's expression (model::Activation kSwiGLU) and swiglu_gradient the
// gradient autograd computes for it, op for op, so the fused model on the CPU equals the unfused
// one bit for bit (tests/fp8/backends/test_swiglu.cpp). The CUDA kernels evaluate swiglu_math.h instead,
// which equals these ops on the CPU (tests/numerics/test_swiglu_math.cpp).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t {
namespace fp8 {

// h [..., 2F] = [gate | up]  ->  at::silu(gate) * up  [..., F], in h's dtype.
at::Tensor swiglu_value(const at::Tensor& h);

// The gradient of h [..., 2F] for dy [..., F] (converted to h's dtype): [dgate | dup] with
// dgate = at::silu_backward(dy * up, gate) and dup = dy * at::silu(gate).
at::Tensor swiglu_gradient(const at::Tensor& dy, const at::Tensor& h);

}  // namespace fp8
}  // namespace fp8t
