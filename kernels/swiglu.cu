// The SwiGLU of the plain (bf16) LLaMA MLP in one pass each way:
//   forward:  y = silu(gate) * up of h = [gate | up], read once, y written once;
//   backward: [dgate | dup] from dy and h, read once, both halves written once.
// What it replaces (at::silu(gate) * up and its autograd on the GPU): the silu kernel and its
// output kept for the backward (one [rows, cols] tensor per layer), the product, and in the
// backward two products, silu_backward and the concatenation of the halves.
//
// The values are lib/numerics/swiglu_math.h's (the fused FP8 casts of kernels/swiglu_cast.cu
// evaluate the same functions), rounded to the dtype where the unfused composition rounds, so
// they equal the CPU computation bit for bit (tests/kernels/test_swiglu.cpp). For bf16 the silu of
// the gate comes from the table of kernels/silu_table.cuh, which each block builds first, so the
// grid is a few blocks per SM striding over the tensor.
#include <stdint.h>  // int64_t

#include "activation.cuh"              // DtypeRound
#include "dispatch.cuh"                // dispatch_dtype, dispatch_bool
#include "fp8_device.cuh"              // load_elem, store_elem, quotient
#include "fp8t_kernels.h"              // the C API
#include "launch.cuh"                  // resident_blocks, allow_dynamic_smem
#include "lib/numerics/swiglu_math.h"  // swiglu_given, swiglu_backward_given
#include "packed.cuh"                  // ldg_floats, stg_floats
#include "precondition.cuh"            // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE
#include "silu_table.cuh"              // GateSilu, build_gate_silu, silu_table_bytes

namespace {

using namespace fp8t::kern;

constexpr int kThreads = 256;

struct SwigluPlainArgs {
  const void* dy;  // backward: [rows, cols]
  const void* h;   // [rows, 2 * cols]
  void* out;       // forward y [rows, cols], backward dh [rows, 2 * cols]
  int64_t rows, cols;
};

// kN consecutive columns (col..col+kN-1) of one row: kN = 8 with 16-byte accesses, 1 scalar.
template <int kDtype, bool kBackward, int kN>
__device__ __forceinline__ void swiglu_columns(const SwigluPlainArgs& a, const GateSilu<kDtype, kBackward>& silu,
                                               int64_t row, int64_t col) {
  const DtypeRound<kDtype> round;
  const int64_t g0 = row * 2 * a.cols + col, u0 = g0 + a.cols, y0 = row * a.cols + col;
  float gate[kN], up[kN];
  if constexpr (kN > 1) {
    ldg_floats<kDtype, kN>(a.h, g0, gate);
    ldg_floats<kDtype, kN>(a.h, u0, up);
  } else {
    gate[0] = load_elem<kDtype>(a.h, g0);
    up[0] = load_elem<kDtype>(a.h, u0);
  }
  fp8t::fp8::SiluOfGate sg[kN];
  silu(gate, sg);
  if constexpr (kBackward) {
    float dy[kN], dgate[kN], dup[kN];
    if constexpr (kN > 1) {
      ldg_floats<kDtype, kN>(a.dy, y0, dy);
    } else {
      dy[0] = load_elem<kDtype>(a.dy, y0);
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const fp8t::fp8::SwigluGrad g = fp8t::fp8::swiglu_backward_given(dy[j], gate[j], up[j], sg[j], round);
      dgate[j] = g.gate;
      dup[j] = g.up;
    }
    if constexpr (kN > 1) {
      stg_floats<kDtype, kN>(a.out, g0, dgate);
      stg_floats<kDtype, kN>(a.out, u0, dup);
    } else {
      store_elem<kDtype>(a.out, g0, dgate[0]);
      store_elem<kDtype>(a.out, u0, dup[0]);
    }
  } else {
    float y[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) y[j] = fp8t::fp8::swiglu_given(sg[j].silu, up[j], round);
    if constexpr (kN > 1) {
      stg_floats<kDtype, kN>(a.out, y0, y);
    } else {
      store_elem<kDtype>(a.out, y0, y[0]);
    }
  }
}

// Grid-stride over items of kN columns of one row.
template <int kDtype, bool kBackward, int kN>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const SwigluPlainArgs a) {
  extern __shared__ __align__(16) unsigned char table_smem[];  // silu_table_bytes<kDtype, kBackward>()
  const GateSilu<kDtype, kBackward> silu = build_gate_silu<kDtype, kBackward>(table_smem);
  const int64_t per_row = a.cols / kN, items = a.rows * per_row;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < items;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = quotient(idx, per_row);
    swiglu_columns<kDtype, kBackward, kN>(a, silu, row, (idx - row * per_row) * kN);
  }
}

// One launch over `items`: a block per kThreads items, at most the resident blocks when the
// blocks build a table (smem > 0), else at most 2^20.
template <auto kKernel>
void launch_plain(int64_t items, size_t smem, cudaStream_t stream, const SwigluPlainArgs& a) {
  (void)allow_dynamic_smem<kKernel>(smem);  // a failed opt-in fails the launch: the caller's cudaGetLastError
  const int64_t cap = smem > 0 ? resident_blocks<kKernel>(kThreads, smem) : (int64_t{1} << 20);
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  kKernel<<<static_cast<unsigned>(blocks < cap ? blocks : cap), kThreads, smem, stream>>>(a);
}

cudaError_t swiglu_plain(const char* launcher, bool backward, const SwigluPlainArgs& a, int dtype,
                         cudaStream_t stream) {
  FP8T_LAUNCHER(launcher);
  FP8T_KERNEL_REQUIRE(a.rows >= 0 && a.cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype), "the dtype is not fp32 or bf16");
  const int64_t n = a.rows * a.cols;
  FP8T_KERNEL_REQUIRE(n == 0 || (a.h != nullptr && a.out != nullptr && (!backward || a.dy != nullptr)),
                      "an input or the output is null for a nonempty tensor");
  if (n == 0) return cudaSuccess;
  const bool vec = a.cols % 8 == 0 && aligned(a.h, 16) && aligned(a.out, 16) && (!backward || aligned(a.dy, 16));
  const int64_t items = vec ? n / 8 : n;
  dispatch_dtype(dtype, [&](auto dt) {
    dispatch_bool(backward, [&](auto bw) {
      constexpr int kDt = decltype(dt)::value;
      constexpr bool kBw = decltype(bw)::value;
      if (vec) {
        launch_plain<swiglu_kernel<kDt, kBw, 8>>(items, silu_table_bytes<kDt, kBw>(), stream, a);
      } else {
        launch_plain<swiglu_kernel<kDt, kBw, 1>>(items, silu_table_bytes<kDt, kBw>(), stream, a);
      }
    });
  });
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t fp8t_swiglu_forward(const void* h, int dtype, int64_t rows, int64_t cols, void* y,
                                           cudaStream_t stream) {
  return swiglu_plain("fp8t_swiglu_forward", false, SwigluPlainArgs{nullptr, h, y, rows, cols}, dtype, stream);
}

extern "C" cudaError_t fp8t_swiglu_backward(const void* dy, const void* h, int dtype, int64_t rows, int64_t cols,
                                            void* dh, cudaStream_t stream) {
  return swiglu_plain("fp8t_swiglu_backward", true, SwigluPlainArgs{dy, h, dh, rows, cols}, dtype, stream);
}
