// Device helpers shared by the cast, cast+transpose, norm and statistics kernels:
// element loads (fp32 / bf16), the float -> FP8 conversion, and the NaN-dropping amax.
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <cuda_runtime.h>  // __float_as_int, __shfl_xor_sync
#include <stdint.h>        // uint8_t, uint16_t

#include "fp8t_kernels.h"         // FP8T_DTYPE_*, FP8T_FORMAT_*
#include "lib/numerics/format.h"  // fp8t::fp8::encode_e4m3 / encode_e5m2 (the reference codec)

namespace fp8t {
namespace kern {

// ---- element access ---------------------------------------------------------------------

// bf16 -> float is exact: the bf16 bits are the top half of the float.
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// float -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN. Same rule as
// c10::BFloat16 (round_to_nearest_even), so a bf16 output matches LibTorch's rounding.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

template <int kDtype>
__device__ __forceinline__ float load_elem(const void* base, int64_t i) {
  if constexpr (kDtype == FP8T_DTYPE_F32) {
    return static_cast<const float*>(base)[i];
  } else {
    return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
  }
}

template <int kDtype>
__device__ __forceinline__ void store_elem(void* base, int64_t i, float v) {
  if constexpr (kDtype == FP8T_DTYPE_F32) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(v);
  }
}

// The value a stored element will read back as (identity for fp32, bf16 rounding otherwise).
template <int kDtype>
__device__ __forceinline__ float round_to_dtype(float v) {
  if constexpr (kDtype == FP8T_DTYPE_F32) {
    return v;
  } else {
    return bf16_bits_to_float(float_to_bf16_bits(v));
  }
}

// p / d for non-negative p and positive d: one 32-bit division (a short instruction sequence)
// when both fit in 32 bits, which every tensor below 2^32 elements does; the 64-bit division
// (a long subroutine) otherwise. For element offsets computed per vector in the grid-stride loops.
__device__ __forceinline__ int64_t quotient(int64_t p, int64_t d) {
  if (((p | d) >> 32) == 0) return static_cast<int64_t>(static_cast<uint32_t>(p) / static_cast<uint32_t>(d));
  return p / d;
}

// ---- float -> FP8 -----------------------------------------------------------------------

// One value. On sm_89+ the hardware conversion (cvt.rn.satfinite) gives the same codes as
// lib/numerics/format.h for every non-NaN input (round to nearest even, saturate to +-max, keep the
// sign of an underflow); NaN is mapped to format.h's canonical 0x7F explicitly, since the
// hardware's NaN code is not part of that contract. tests/kernels/test_cast.cpp checks this
// bit for bit on the GPU.
template <int kFormat>
__device__ __forceinline__ uint16_t to_fp8x2(float a, float b) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  uint16_t r;
  if constexpr (kFormat == FP8T_FORMAT_E4M3) {
    asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;}\n" : "=h"(r) : "f"(a), "f"(b));
  } else {
    asm("{cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;}\n" : "=h"(r) : "f"(a), "f"(b));
  }
  if (a != a) r = static_cast<uint16_t>((r & 0xff00u) | 0x7fu);
  if (b != b) r = static_cast<uint16_t>((r & 0x00ffu) | 0x7f00u);
  return r;
#else
  if constexpr (kFormat == FP8T_FORMAT_E4M3) {
    return static_cast<uint16_t>(fp8::encode_e4m3(a) | (fp8::encode_e4m3(b) << 8));
  } else {
    return static_cast<uint16_t>(fp8::encode_e5m2(a) | (fp8::encode_e5m2(b) << 8));
  }
#endif
}

template <int kFormat>
__device__ __forceinline__ uint8_t to_fp8(float a) {
  return static_cast<uint8_t>(to_fp8x2<kFormat>(a, 0.0f) & 0xffu);
}

// ---- amax ---------------------------------------------------------------------------------
//
// |x| as an int: for non-negative floats the int order is the float order, so an integer max
// over abs_bits is fp8::amax_combine (lib/numerics/scaling_math.h). A NaN element counts as 0: it
// never reaches the amax, as in TransformerEngine's fmaxf-based cast amax; +-inf counts (its
// bits are the largest non-NaN ones). Blocks reduce in registers/shared memory and issue ONE
// atomicMax each.

__device__ __forceinline__ int abs_bits(float v) { return v != v ? 0 : __float_as_int(fabsf(v)); }

__device__ __forceinline__ int warp_max_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide max of `v` (abs bits), then one atomicMax into *amax from thread 0.
// Every thread of the block must call it (it synchronises). blockDim.x % 32 == 0.
__device__ __forceinline__ void block_amax_commit(int v, float* amax) {
  __shared__ int warp_max[32];
  v = warp_max_int(v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x >> 5;
    v = lane < n_warps ? warp_max[lane] : 0;
    v = warp_max_int(v);
    if (lane == 0 && amax != nullptr) atomicMax(reinterpret_cast<int*>(amax), v);
  }
}

// Block-wide sum of `v`; the result is valid in every thread. `scratch` holds 32 floats and
// may be reused after the call returns. blockDim.x % 32 == 0.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < n_warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  return total;
}

}  // namespace kern
}  // namespace fp8t
