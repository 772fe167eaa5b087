// The plain model's SwiGLU, silu(gate) * up of h = [gate | up], in one kernel each way on the GPU
// (kernels/swiglu.cu): the backward reads h and dy once and writes [dgate | dup] once, and only h
// is kept for it (the unfused composition also keeps silu(gate), a [rows, F] tensor per layer).
// The values are those of the CPU composition (lib/numerics/swiglu_math.h: at::silu's FP32
// expression with ATen's CPU vector exp, rounded where at::silu and the product round), so the GPU
// gives the CPU's bits; ATen's CUDA silu (expf) differs from them in the last bit of some
// elements. Used by model::Activation on CUDA; elsewhere the model runs at::silu(gate) * up.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t {
namespace ops {

// True when swiglu runs fused for h: a CUDA build, h a CUDA float32 or bfloat16 tensor with an
// even last dim.
bool swiglu_fused(const at::Tensor& h);

// h [..., 2F] -> silu(gate) * up [..., F] in h's dtype, differentiable in h. Requires swiglu_fused.
at::Tensor swiglu(const at::Tensor& h);

#if defined(FP8T_WITH_CUDA)
namespace detail {
at::Tensor swiglu_cuda(const at::Tensor& h);  // lib/ops/swiglu_cuda.cpp; checked by swiglu
}  // namespace detail
#endif

}  // namespace ops
}  // namespace fp8t
