// Single IEEE float operations, rounded to nearest, that give the same bits on the host and in a
// kernel. nvcc contracts a mul.f32 followed by an add.f32 into one fma (even across a select);
// the __f*_rn intrinsics are never contracted. Host code is not contracted either: the build
// targets x86-64 without FMA and uses -std=c++20 (no GNU extensions), so GCC does not contract
// across statements, and nothing here relies on -ffp-contract. sqrt and division are IEEE-exact
// on both sides (nvcc's default -prec-sqrt/-prec-div, no fast math). An a*b+c meant as one
// rounding is fma_rn.
//
// The SwiGLU formulas (swiglu_math.h) and AdamW's update (adamw_math.h) are written with these.
#pragma once

#include <cmath>   // std::fma (host; nvcc provides the device intrinsics)
#include <math.h>  // sqrtf

#include "lib/numerics/host_device.h"  // FP8T_HOST_DEVICE

namespace fp8t {
namespace numerics {

FP8T_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FP8T_HOST_DEVICE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

FP8T_HOST_DEVICE float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

FP8T_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FP8T_HOST_DEVICE float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return sqrtf(a);
#endif
}

// a * b + c with one rounding.
FP8T_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace numerics
}  // namespace fp8t
