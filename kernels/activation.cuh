// The activations the FP8 casts evaluate in their kernels (GELU, its backward, and the dtype
// rounding the SwiGLU math of lib/numerics/swiglu_math.h takes), written once: the fused casts
// (kernels/cast_transpose.cu, kernels/swiglu_cast.cu) and current scaling's amax passes
// (kernels/amax.cu) call the same functions, so an amax pass sees exactly the values the cast
// then quantizes.
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <math.h>  // tanhf, M_SQRT2, M_2_SQRTPI

#include "dispatch.cuh"     // IntTag
#include "fp8_device.cuh"   // round_to_dtype
#include "fp8t_kernels.h"   // FP8T_ACT_*

namespace fp8t {
namespace kern {

// GELU, tanh approximation, in FP32 with LibTorch's operation order (at::gelu(x, "tanh") and
// at::gelu_backward): the callers round the result to the input dtype, so the codes equal those
// of casting the unfused operator's output.
constexpr float kGeluBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float x_cube = x * x * x;
  const float inner = kGeluBeta * (x + kGeluKappa * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// dy * gelu'(x).
__device__ __forceinline__ float gelu_tanh_backward(float dy, float x) {
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = kGeluBeta * (x + kGeluKappa * x_cube);
  const float tanh_inner = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.0f + tanh_inner;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.0f - tanh_inner * tanh_inner;
  const float inner_derivative = kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

// What a GELU-fused cast evaluates before it quantizes: x itself, gelu(x), or the GELU backward
// dy * gelu'(h) (x = dy). The values are the C API's FP8T_ACT_* codes.
enum Act { kActNone = FP8T_ACT_NONE, kActGelu = FP8T_ACT_GELU, kActDgelu = FP8T_ACT_DGELU };

// f(IntTag<act>{}) for kActGelu and kActDgelu, f(IntTag<kActNone>{}) for anything else (the
// launchers check the code first).
template <typename F>
void dispatch_act(int act, F&& f) {
  if (act == kActGelu) {
    f(IntTag<kActGelu>{});
  } else if (act == kActDgelu) {
    f(IntTag<kActDgelu>{});
  } else {
    f(IntTag<kActNone>{});
  }
}

// The activation dtype as a rounding of FP32 values (the Round of lib/numerics/swiglu_math.h).
// bf16 on sm_80+: the hardware conversion (cvt.rn.bf16.f32, round to nearest even), one
// instruction against the integer rounding's five: the same value as round_to_dtype for every
// non-NaN input; a NaN stays a NaN (the canonical one, which the GPU's arithmetic gives for a
// NaN result anyway; the FP8 casts map NaN to their own code and amax ignores NaN).
template <int kDtype>
struct DtypeRound {
  __device__ __forceinline__ float operator()(float v) const {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
    if constexpr (kDtype != FP8T_DTYPE_F32) {
      uint16_t b;
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
      return __uint_as_float(static_cast<uint32_t>(b) << 16);
    }
#endif
    return round_to_dtype<kDtype>(v);
  }
};

}  // namespace kern
}  // namespace fp8t
