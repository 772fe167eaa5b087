// One aligned vector memory access of 8 or 16 bytes (llm.c's Packed128), seen as 32-bit words and
// converted to and from floats (fp32 or bf16 elements) or FP8 codes. Every vector load and store
// of kernels/ goes through it, so the element packing exists once.
//
// The caller guarantees the alignment (kBytes) of every address it passes.
#pragma once

#include <cuda_runtime.h>  // uint2, uint4, __ldg
#include <stdint.h>        // uint8_t, uint32_t

#include "fp8_device.cuh"  // bf16_bits_to_float, float_to_bf16_bits
#include "fp8t_kernels.h"  // FP8T_DTYPE_*

namespace fp8t {
namespace kern {

// Bytes of one fp32 or bf16 element.
template <int kDtype>
constexpr int elem_bytes() {
  return kDtype == FP8T_DTYPE_F32 ? 4 : 2;
}

template <int kBytes>
struct Packed {
  static_assert(kBytes == 8 || kBytes == 16, "8- or 16-byte accesses");
  static constexpr int kWords = kBytes / 4;
  // fp32 or bf16 elements in one access.
  template <int kDtype>
  static constexpr int elems() {
    return kBytes / elem_bytes<kDtype>();
  }

  uint32_t w[kWords];

  // Through the read-only data cache: for inputs that no thread of the kernel writes.
  __device__ __forceinline__ static Packed ldg(const void* p) {
    Packed r;
    if constexpr (kBytes == 16) {
      const uint4 q = __ldg(static_cast<const uint4*>(p));
      r.w[0] = q.x, r.w[1] = q.y, r.w[2] = q.z, r.w[3] = q.w;
    } else {
      const uint2 q = __ldg(static_cast<const uint2*>(p));
      r.w[0] = q.x, r.w[1] = q.y;
    }
    return r;
  }

  // A plain load: for memory the kernel may also write (in-place updates).
  __device__ __forceinline__ static Packed load(const void* p) {
    Packed r;
    if constexpr (kBytes == 16) {
      const uint4 q = *static_cast<const uint4*>(p);
      r.w[0] = q.x, r.w[1] = q.y, r.w[2] = q.z, r.w[3] = q.w;
    } else {
      const uint2 q = *static_cast<const uint2*>(p);
      r.w[0] = q.x, r.w[1] = q.y;
    }
    return r;
  }

  __device__ __forceinline__ void store(void* p) const {
    if constexpr (kBytes == 16) {
      *static_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      *static_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    }
  }

  // The elements as floats, in memory order (bf16 -> float is exact).
  template <int kDtype>
  __device__ __forceinline__ void unpack(float* v) const {
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      if constexpr (kDtype == FP8T_DTYPE_F32) {
        v[j] = __uint_as_float(w[j]);
      } else {
        v[2 * j] = bf16_bits_to_float(static_cast<uint16_t>(w[j] & 0xffffu));
        v[2 * j + 1] = bf16_bits_to_float(static_cast<uint16_t>(w[j] >> 16));
      }
    }
  }

  // elems<kDtype>() floats stored as kDtype (bf16: rounded like store_elem).
  template <int kDtype>
  __device__ __forceinline__ static Packed pack(const float* v) {
    Packed r;
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      if constexpr (kDtype == FP8T_DTYPE_F32) {
        r.w[j] = __float_as_uint(v[j]);
      } else {
        r.w[j] = static_cast<uint32_t>(float_to_bf16_bits(v[2 * j])) |
                 (static_cast<uint32_t>(float_to_bf16_bits(v[2 * j + 1])) << 16);
      }
    }
    return r;
  }

  // kBytes FP8 codes, in memory order.
  __device__ __forceinline__ static Packed from_bytes(const uint8_t* b) {
    Packed r;
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      r.w[j] = b[4 * j] | (b[4 * j + 1] << 8) | (b[4 * j + 2] << 16) | (static_cast<uint32_t>(b[4 * j + 3]) << 24);
    }
    return r;
  }

  __device__ __forceinline__ void to_bytes(uint8_t* b) const {
#pragma unroll
    for (int i = 0; i < kBytes; ++i) b[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
  }
};

using Packed128 = Packed<16>;

// kN consecutive fp32/bf16 elements of x starting at element `first` (16-byte aligned) as floats,
// through the read-only cache: every load is issued before the first conversion.
template <int kDtype, int kN>
__device__ __forceinline__ void ldg_floats(const void* x, int64_t first, float (&v)[kN]) {
  constexpr int kPer = Packed128::elems<kDtype>();
  static_assert(kN % kPer == 0, "whole 16-byte vectors");
  constexpr int kLoads = kN / kPer;
  const char* p = static_cast<const char*>(x) + first * elem_bytes<kDtype>();
  Packed128 q[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) q[i] = Packed128::ldg(p + 16 * i);
#pragma unroll
  for (int i = 0; i < kLoads; ++i) q[i].unpack<kDtype>(v + kPer * i);
}

// kN floats stored as consecutive fp32/bf16 elements of y starting at element `first` (16-byte
// aligned; bf16: rounded like store_elem).
template <int kDtype, int kN>
__device__ __forceinline__ void stg_floats(void* y, int64_t first, const float (&v)[kN]) {
  constexpr int kPer = Packed128::elems<kDtype>();
  static_assert(kN % kPer == 0, "whole 16-byte vectors");
  char* p = static_cast<char*>(y) + first * elem_bytes<kDtype>();
#pragma unroll
  for (int i = 0; i < kN / kPer; ++i) Packed128::pack<kDtype>(v + kPer * i).store(p + 16 * i);
}

}  // namespace kern
}  // namespace fp8t
