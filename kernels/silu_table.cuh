// The SwiGLU kernels' silu(gate) for bf16 gates: lib/numerics/swiglu_math.h's table of
// silu_of_gate, built by every block in its shared memory from the formula itself (8192 gates:
// the silu as bf16 bits, and for the backward the sigmoid in FP32), then read once per element
// instead of evaluating vector_exp and the IEEE divisions (silu_of_bf16_gate). fp32 gates take
// the formula. The values are the formula's bit for bit (tests/numerics/test_swiglu_math.cpp
// checks every bf16 gate on the host; the kernels' tests check every one on the GPU).
//
// Shared memory: 16 KiB for the forward, 48 KiB for the backward, dynamic (the callers' own static
// buffers come on top, past the 48 KiB a block gets without opting in: kernels/launch.cuh allow_dynamic_smem).
// Building costs each block 8192 evaluations of the formula, so the kernels that read the table
// run grids of a few blocks per SM that stride over the tensor.
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <stddef.h>  // size_t
#include <stdint.h>  // uint16_t

#include "activation.cuh"              // DtypeRound
#include "fp8t_kernels.h"              // FP8T_DTYPE_*
#include "lib/numerics/swiglu_math.h"  // silu_of_gate, silu_of_bf16_gate, silu_table_gate, kSiluTable*

namespace fp8t {
namespace kern {

// The table in shared memory: entry i is silu_of_gate(silu_table_gate(i)) (sig only with kSig).
template <bool kSig>
struct SiluTable {
  const uint16_t* silu;  // bf16 bits
  const float* sig;      // kSig only
  __device__ __forceinline__ fp8t::fp8::SiluOfGate operator()(int i) const {
    fp8t::fp8::SiluOfGate s;
    s.silu = __uint_as_float(static_cast<uint32_t>(silu[i]) << 16);
    s.sig = kSig ? sig[i] : 0.0f;
    return s;
  }
};

// Bytes of dynamic shared memory a kernel of this dtype needs for its table (0: fp32, no table).
template <int kDtype, bool kSig>
constexpr size_t silu_table_bytes() {
  return kDtype == FP8T_DTYPE_BF16 ? fp8t::fp8::kSiluTableSize * (sizeof(uint16_t) + (kSig ? sizeof(float) : 0)) : 0;
}

// silu_of_gate as the SwiGLU kernels evaluate it: the table for bf16 gates, the formula for fp32.
// kSig: the sigmoid is needed too (the backward).
template <int kDtype, bool kSig>
struct GateSilu {
  SiluTable<kSig> table;  // bf16 only

  // One gate (the kernels' scalar paths).
  __device__ __forceinline__ fp8t::fp8::SiluOfGate operator()(float gate) const {
    const DtypeRound<kDtype> round;
    if constexpr (kDtype == FP8T_DTYPE_BF16) {
      return fp8t::fp8::silu_of_bf16_gate(gate, table, round);
    } else {
      return fp8t::fp8::silu_of_gate(gate, round);
    }
  }

  // kN gates (a thread's vector of them): when all are finite, the common case and one check per
  // vector, the table reads of all kN without a branch between them; otherwise one at a time.
  template <int kN>
  __device__ __forceinline__ void operator()(const float (&gate)[kN], fp8t::fp8::SiluOfGate (&s)[kN]) const {
    if constexpr (kDtype == FP8T_DTYPE_BF16) {
      bool finite = true;
#pragma unroll
      for (int j = 0; j < kN; ++j) finite = finite && fp8t::fp8::is_finite_bits(gate[j]);
      if (finite) {
        const DtypeRound<kDtype> round;
#pragma unroll
        for (int j = 0; j < kN; ++j) s[j] = fp8t::fp8::silu_of_finite_bf16_gate(gate[j], table, round);
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) s[j] = (*this)(gate[j]);
  }
};

// Builds the block's table in `smem` (silu_table_bytes<kDtype, kSig>() bytes, 16-byte aligned;
// nothing for fp32). Every thread of the block calls it; it ends with a barrier.
template <int kDtype, bool kSig>
__device__ __forceinline__ GateSilu<kDtype, kSig> build_gate_silu(unsigned char* smem) {
  GateSilu<kDtype, kSig> g{};
  if constexpr (kDtype == FP8T_DTYPE_BF16) {
    constexpr int kSize = fp8t::fp8::kSiluTableSize;
    float* sig = reinterpret_cast<float*>(smem);  // the 4-byte entries first
    uint16_t* silu = reinterpret_cast<uint16_t*>(smem + (kSig ? kSize * sizeof(float) : 0));
    const DtypeRound<kDtype> round;
    for (int i = threadIdx.x; i < kSize; i += blockDim.x) {
      const fp8t::fp8::SiluOfGate s = fp8t::fp8::silu_of_gate(fp8t::fp8::silu_table_gate(i), round);
      silu[i] = static_cast<uint16_t>(__float_as_uint(s.silu) >> 16);
      if constexpr (kSig) sig[i] = s.sig;
    }
    __syncthreads();
    g.table = SiluTable<kSig>{silu, sig};
  }
  return g;
}

}  // namespace kern
}  // namespace fp8t
