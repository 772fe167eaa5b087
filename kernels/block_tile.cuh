// The per-thread building blocks of the block casts (kernels/block_quantize.cu): a 256-thread CTA
// owns a 128x128 tile of x, thread (tr, tc) = (tid / 16, tid % 16) the 8x8 sub-tile at rows
// 8*tr.. and cols 8*tc.. It holds the values in the input dtype (bf16 pairs stay packed: 32
// registers for 64 values), loads each sub-tile row with one or two 16-byte loads (every load
// issued before the first use), evaluates GELU or its backward in place (kernels/activation.cuh,
// rounded to the dtype as the unfused operator's output is), and encodes 8 values at a time to
// E4M3 with the hardware conversion.
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <cuda_runtime.h>  // __uint_as_float, uint2
#include <stdint.h>        // uint8_t, uint32_t, int64_t

#include "activation.cuh"             // gelu_tanh, gelu_tanh_backward, Act, dispatch_act
#include "fp8_device.cuh"             // load_elem, round_to_dtype
#include "fp8t_kernels.h"             // FP8T_DTYPE_*, FP8T_ACT_*
#include "lib/numerics/block_math.h"  // kBlockLen
#include "lib/numerics/format.h"      // encode_e4m3 (pre-sm_89 fallback)
#include "packed.cuh"                 // Packed

namespace fp8t {
namespace kern {
namespace block {

constexpr int kTile = fp8::kBlockLen;  // 128
constexpr int kThreads = 256;
constexpr int kSub = 8;                     // a thread's sub-tile is kSub x kSub
constexpr int kLanesPerRow = kTile / kSub;  // 16: a half-warp spans one tile row
constexpr int kWarps = kThreads / 32;
constexpr int kRowPartStride = kLanesPerRow + 2;  // 18 floats: the two half-warps' rows hit different banks

struct Tile {
  int64_t r0, c0;  // first row / col of the tile in x
  int tr, tc;      // this thread's sub-tile (rows 8*tr.., cols 8*tc..)
};

__device__ __forceinline__ Tile this_tile() {
  Tile t;
  t.r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  t.c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  t.tc = threadIdx.x % kLanesPerRow;
  t.tr = threadIdx.x / kLanesPerRow;
  return t;
}

// ---- a thread's 8x8 values, in the input dtype ----------------------------------------------

template <int kDtype>
struct SubTile;

// bf16: 4 words of bf16 pairs per row (memory order); a value is its bits in the top half.
template <>
struct SubTile<FP8T_DTYPE_BF16> {
  uint32_t w[kSub][kSub / 2];
  __device__ __forceinline__ float at(int i, int j) const {
    const uint32_t u = w[i][j / 2];
    return __uint_as_float(j % 2 == 1 ? (u & 0xffff0000u) : (u << 16));
  }
  __device__ __forceinline__ void load_row(int i, const void* x, int64_t first) {
    const Packed<16> p = Packed<16>::ldg(static_cast<const uint16_t*>(x) + first);
#pragma unroll
    for (int k = 0; k < kSub / 2; ++k) w[i][k] = p.w[k];
  }
  // v: values that are bf16 already (round_to_dtype'd), so the top half is exact.
  __device__ __forceinline__ void set_row(int i, const float (&v)[kSub]) {
#pragma unroll
    for (int k = 0; k < kSub / 2; ++k) w[i][k] = (__float_as_uint(v[2 * k]) >> 16) | (__float_as_uint(v[2 * k + 1]) & 0xffff0000u);
  }
};

template <>
struct SubTile<FP8T_DTYPE_F32> {
  float v[kSub][kSub];
  __device__ __forceinline__ float at(int i, int j) const { return v[i][j]; }
  __device__ __forceinline__ void load_row(int i, const void* x, int64_t first) {
    const float* p = static_cast<const float*>(x) + first;
    const Packed<16> a = Packed<16>::ldg(p), b = Packed<16>::ldg(p + 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[i][k] = __uint_as_float(a.w[k]), v[i][4 + k] = __uint_as_float(b.w[k]);
  }
  __device__ __forceinline__ void set_row(int i, const float (&r)[kSub]) {
#pragma unroll
    for (int k = 0; k < kSub; ++k) v[i][k] = r[k];
  }
};

// The sub-tile of x (rows x cols, row-major); elements outside x read as 0 (they change no amax
// or sum, and gelu(0) = dgelu(0, .) = 0). vec: 16-byte loads (cols % 8 == 0 and x 16-byte
// aligned, so an 8-element row chunk is wholly inside or outside).
template <int kDtype>
__device__ __forceinline__ void load_sub_tile(SubTile<kDtype>& s, const void* x, int64_t rows, int64_t cols,
                                              const Tile& t, bool vec) {
  const int64_t col = t.c0 + kSub * t.tc;
  const int64_t row0 = t.r0 + kSub * t.tr;
  if (vec && row0 + kSub <= rows && col < cols) {
#pragma unroll
    for (int i = 0; i < kSub; ++i) s.load_row(i, x, (row0 + i) * cols + col);
    return;
  }
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    const int64_t row = row0 + i;
    if (vec && row < rows && col < cols) {
      s.load_row(i, x, row * cols + col);
    } else {
      float v[kSub];
#pragma unroll
      for (int j = 0; j < kSub; ++j) v[j] = (row < rows && col + j < cols) ? load_elem<kDtype>(x, row * cols + col + j) : 0.0f;
      s.set_row(i, v);
    }
  }
}

// x := gelu(x) or gelu_backward(dy = x, h), rounded to the dtype (what the unfused operator stores).
template <int kAct, int kDtype>
__device__ __forceinline__ void apply_activation(SubTile<kDtype>& s, const SubTile<kDtype>& h) {
  if constexpr (kAct != kActNone) {
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      float v[kSub];
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        const float g = kAct == kActGelu ? gelu_tanh(s.at(i, j)) : gelu_tanh_backward(s.at(i, j), h.at(i, j));
        v[j] = round_to_dtype<kDtype>(g);
      }
      s.set_row(i, v);
    }
  }
}

// ---- FP8 codes ------------------------------------------------------------------------------

// Two E4M3 codes (lo in the low byte), saturating, round to nearest even.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  uint16_t r;
  asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;}\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return fp8::encode_e4m3(lo) | (static_cast<uint32_t>(fp8::encode_e4m3(hi)) << 8);
#endif
}

// Four codes in a word with every NaN code made format.h's canonical 0x7F. cvt.satfinite maps
// NaN (and only NaN: inf and overflow saturate to +-448 = 0x7E) to a NaN code, 0x7F or 0xFF; the
// sign of exactly those bytes is cleared (b & 0x7F == 0x7F iff (b & 0x7F) + 1 carries into bit 7).
__device__ __forceinline__ uint32_t canonical_nan4(uint32_t w) {
  return w & ~(((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u);
}

// Codes of v[0..7] * s in memory order.
__device__ __forceinline__ uint2 encode8(const float (&v)[kSub], float s) {
  const uint32_t lo = e4m3x2(v[0] * s, v[1] * s) | (e4m3x2(v[2] * s, v[3] * s) << 16);
  const uint32_t hi = e4m3x2(v[4] * s, v[5] * s) | (e4m3x2(v[6] * s, v[7] * s) << 16);
  return make_uint2(canonical_nan4(lo), canonical_nan4(hi));
}

}  // namespace block
}  // namespace kern
}  // namespace fp8t
