// Current scaling's amax pass: max|value| of the tensor a cast is about to quantize, or of the
// value a fused cast evaluates in its kernel (GELU, its backward, SwiGLU, its backward), without
// writing that value; and the scale, from the same launch. For SwiGLU and its backward the pass can
// also write the value (fp8t_swiglu_amax_scale_value): current scaling then casts that tensor with
// the plain cast kernels, which run at memory bandwidth, instead of evaluating the SwiGLU a second
// time inside the fused casts (the value costs more instructions than its bytes cost time).
//
// Unlike the tiled cast kernels (cast_tile.cuh), whose 64x64 tiles suit the transposed store,
// this pass has nothing to store, so it streams the inputs flat: a grid of a few CTAs per SM
// strides over 16-byte vectors, several loads in flight per thread, every value through
// kernels/activation.cuh / lib/numerics/swiglu_math.h exactly as the cast computes it (GELU values
// only where they could raise the max: see "skipping" below; likewise the SwiGLU values when the
// pass does not write them, by lib/numerics/swiglu_math.h's bounds; the pass that writes a bf16
// SwiGLU's value reads silu(gate) from the table of kernels/silu_table.cuh, built by each CTA in
// shared memory, as in the casts). Each CTA reduces to one max (warp shuffles), then one atomicMax
// into the workspace accumulator (|x| as int bits: fp8_device.cuh abs_bits, so NaN elements are
// ignored and inf counts, amax_combine). The last CTA to finish (a ticket counter) reads the final
// amax, writes it, computes the scale with scaling_math.h current_scale (the one formula of the
// CPU and the GPU), and zeroes the accumulator and ticket for the next call: one launch per cast,
// no memset, no scale kernel.
//
// Near 590 lines, one file: every pass shares the loads, the point values and the commit of one
// anonymous namespace, and the two skipping schemes (GELU, SwiGLU) sit beside the plain pass they
// depart from.
#include "activation.cuh"               // gelu_tanh, gelu_tanh_backward, DtypeRound
#include "dispatch.cuh"                 // dispatch_dtype, IntTag
#include "fp8_device.cuh"               // abs_bits, warp_max_int, load_elem, store_elem, quotient
#include "fp8t_kernels.h"               // the C API
#include "lib/numerics/scaling_math.h"  // fp8t::fp8::current_scale
#include "launch.cuh"                   // sm_count, allow_dynamic_smem
#include "lib/numerics/swiglu_math.h"   // swiglu_given, swiglu_backward_given
#include "packed.cuh"                   // Packed128, elem_bytes, stg_floats
#include "precondition.cuh"             // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE
#include "silu_table.cuh"               // GateSilu, build_gate_silu, silu_table_bytes

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;

enum Op {
  kNone = FP8T_ACT_NONE,
  kGelu = FP8T_ACT_GELU,
  kDgelu = FP8T_ACT_DGELU,
  kSwiglu = FP8T_ACT_SWIGLU,
  kDswiglu = FP8T_ACT_DSWIGLU,
};

constexpr int kThreads = 256;
// 4 CTAs of 256 threads per SM (at most 64 registers a thread keeps them all resident) with
// kUnroll 16-byte loads per input in flight per thread: well over the bytes in flight an SM
// needs to cover HBM latency.
constexpr int kCtasPerSm = 4;

// Inputs a point of the value reads: x; x; dy and h; gate and up; dy, gate and up.
template <int kOp>
constexpr int n_inputs() {
  return kOp == kNone || kOp == kGelu ? 1 : (kOp == kDswiglu ? 3 : 2);
}

template <int kOp>
constexpr int unroll() {
  return n_inputs<kOp>() == 1 ? 4 : 2;
}

struct AmaxArgs {
  const void* x;
  const void* h;
  int64_t n;     // points: rows * cols (a SwiGLU point is one element of gate, up and dy)
  int64_t cols;  // SwiGLU: the row length of gate and up (h rows are 2 * cols)
  float* amax;
  unsigned int* ws;  // [accumulator (abs bits), ticket]
  float fp8_max, two_pow_margin;
  float* scale;
  float* scale_inv;
  void* out;  // kStore only: y [rows, cols] or [dgate | dup] [rows, 2 * cols], in the input dtype
  bool vec;
};

// Values a point of the op has: [dgate, dup] for the SwiGLU backward, else one.
template <int kOp>
constexpr int n_values() {
  return kOp == kDswiglu ? 2 : 1;
}

// Only the SwiGLU ops write their value (kStore).
template <int kOp, bool kStore>
constexpr bool valid_store() {
  return !kStore || kOp == kSwiglu || kOp == kDswiglu;
}

// Element offsets of point p's inputs (see n_inputs).
template <int kOp>
__device__ __forceinline__ void input_offsets(int64_t p, int64_t cols, int64_t (&off)[3]) {
  if constexpr (kOp == kSwiglu || kOp == kDswiglu) {
    const int64_t gate = p + quotient(p, cols) * cols;  // row r of h starts at 2 * cols * r
    const int i = kOp == kDswiglu ? 1 : 0;
    off[0] = p;  // dy (kDswiglu; overwritten by gate for kSwiglu)
    off[i] = gate;
    off[i + 1] = gate + cols;
  } else {
    off[0] = off[1] = off[2] = p;
  }
}

template <int kOp>
__device__ __forceinline__ const void* input_base(const AmaxArgs& a, int i) {
  if constexpr (kOp == kSwiglu) return a.x;  // gate and up: both halves of h = x
  return i == 0 ? a.x : a.h;                 // x; or dy = x, then h (GELU) or gate and up (SwiGLU)
}

// The SwiGLU ops' silu(gate): the bf16 table each block builds in shared memory, or the formula
// (kernels/silu_table.cuh); unused by the other ops.
template <int kOp>
constexpr bool uses_silu() {
  return kOp == kSwiglu || kOp == kDswiglu;
}
template <int kDtype, int kOp>
using OpSilu = GateSilu<kDtype, kOp == kDswiglu>;

// The SwiGLU passes that do not write the value skip by bounds (below) and evaluate few gates:
// they take silu_of_gate by the formula, the table's bits (tests/numerics/test_swiglu_math.cpp),
// and build no table.
template <int kOp, bool kStore>
constexpr bool skips_by_bound() {
  return uses_silu<kOp>() && !kStore;
}

template <int kDtype>
struct FormulaSilu {
  __device__ __forceinline__ fp8t::fp8::SiluOfGate operator()(float gate) const {
    return fp8t::fp8::silu_of_gate(gate, DtypeRound<kDtype>{});
  }
};

template <int kDtype, int kOp, bool kStore>
constexpr size_t op_smem_bytes() {
  return uses_silu<kOp>() && kStore ? silu_table_bytes<kDtype, kOp == kDswiglu>() : 0;
}

// The input that holds the gate (SwiGLU ops): dy comes first in the backward.
template <int kOp>
constexpr int gate_input() {
  return kOp == kDswiglu ? 1 : 0;
}

// The value(s) of one point from its input values (in[0..n_inputs)): the cast kernels' formulas.
// sg: silu_of_gate of the point's gate (SwiGLU ops; ignored by the others).
template <int kDtype, int kOp>
__device__ __forceinline__ void point_values(const float (&in)[3], const fp8t::fp8::SiluOfGate& sg,
                                             float (&v)[n_values<kOp>()]) {
  if constexpr (kOp == kNone) {
    v[0] = in[0];
  } else if constexpr (kOp == kGelu) {
    v[0] = round_to_dtype<kDtype>(gelu_tanh(in[0]));
  } else if constexpr (kOp == kDgelu) {
    v[0] = round_to_dtype<kDtype>(gelu_tanh_backward(in[0], in[1]));
  } else if constexpr (kOp == kSwiglu) {
    v[0] = fp8t::fp8::swiglu_given(sg.silu, in[1], DtypeRound<kDtype>{});
  } else {
    const fp8t::fp8::SwigluGrad g = fp8t::fp8::swiglu_backward_given(in[0], in[1], in[2], sg, DtypeRound<kDtype>{});
    v[0] = g.gate;
    v[1] = g.up;
  }
}

// |value| bits of one point's values (the max of both gradient halves for the SwiGLU backward).
template <int kOp>
__device__ __forceinline__ int max_abs_bits(const float (&v)[n_values<kOp>()]) {
  int m = abs_bits(v[0]);
#pragma unroll
  for (int i = 1; i < n_values<kOp>(); ++i) m = max(m, abs_bits(v[i]));
  return m;
}

// |value| bits of one point from its input values.
template <int kDtype, int kOp>
__device__ __forceinline__ int value_bits(const float (&in)[3]) {
  float v[n_values<kOp>()];
  point_values<kDtype, kOp>(in, fp8t::fp8::SiluOfGate{}, v);
  return max_abs_bits<kOp>(v);
}

// kStore: kN consecutive points' values, starting at point p whose inputs sit at off (input_offsets),
// into a.out: y at p, or dgate and dup where gate and up sit in h. kN = 1: scalar stores.
template <int kDtype, int kOp, int kN>
__device__ __forceinline__ void store_values(const AmaxArgs& a, int64_t p, const int64_t (&off)[3],
                                             const float (&v)[n_values<kOp>()][kN]) {
  const int64_t at[2] = {kOp == kSwiglu ? p : off[1], off[2]};
#pragma unroll
  for (int i = 0; i < n_values<kOp>(); ++i) {
    if constexpr (kN == 1) {
      store_elem<kDtype>(a.out, at[i], v[i][0]);
    } else {
      stg_floats<kDtype, kN>(a.out, at[i], v[i]);
    }
  }
}

// One point, scalar loads (any alignment); kStore also writes its value(s). silu: OpSilu or
// FormulaSilu (SwiGLU ops).
template <int kDtype, int kOp, bool kStore, typename Silu>
__device__ __forceinline__ int point_bits(const AmaxArgs& a, const Silu& silu, int64_t p) {
  int64_t off[3];
  input_offsets<kOp>(p, a.cols, off);
  float in[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < n_inputs<kOp>(); ++i) in[i] = load_elem<kDtype>(input_base<kOp>(a, i), off[i]);
  float v[n_values<kOp>()];
  fp8t::fp8::SiluOfGate sg{};
  if constexpr (uses_silu<kOp>()) sg = silu(in[gate_input<kOp>()]);
  point_values<kDtype, kOp>(in, sg, v);
  if constexpr (kStore) {
    float w[n_values<kOp>()][1];
#pragma unroll
    for (int i = 0; i < n_values<kOp>(); ++i) w[i][0] = v[i];
    store_values<kDtype, kOp, 1>(a, p, off, w);
  }
  return max_abs_bits<kOp>(v);
}

// A thread's grid-stride walk over `groups` vector groups: its first group (tid) and the stride.
struct GridStride {
  int64_t groups, stride, tid;
  __device__ __forceinline__ explicit GridStride(int64_t n_groups)
      : groups(n_groups),
        stride(static_cast<int64_t>(gridDim.x) * blockDim.x),
        tid(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) {}
};

// Vector group g: points g * kVec .. g * kVec + kVec - 1, one 16-byte load per input (off: where
// the inputs of the group's first point sit).
template <int kDtype, int kOp>
__device__ __forceinline__ void load_group(const AmaxArgs& a, int64_t g, Packed128 (&q)[3], int64_t (&off)[3]) {
  constexpr int kVec = Packed128::elems<kDtype>();
  input_offsets<kOp>(g * kVec, a.cols, off);
#pragma unroll
  for (int i = 0; i < n_inputs<kOp>(); ++i) {
    q[i] = Packed128::ldg(static_cast<const char*>(input_base<kOp>(a, i)) + off[i] * elem_bytes<kDtype>());
  }
}

// The group's max |value| bits; kStore also writes its values (16-byte stores).
template <int kDtype, int kOp, bool kStore>
__device__ __forceinline__ int group_bits(const AmaxArgs& a, const OpSilu<kDtype, kOp>& silu, int64_t g,
                                          const Packed128 (&q)[3], const int64_t (&off)[3]) {
  constexpr int kVec = Packed128::elems<kDtype>();
  float v[3][kVec];
#pragma unroll
  for (int i = 0; i < n_inputs<kOp>(); ++i) q[i].unpack<kDtype>(v[i]);
  fp8t::fp8::SiluOfGate sg[kVec];
  if constexpr (uses_silu<kOp>()) silu(v[gate_input<kOp>()], sg);
  float out[n_values<kOp>()][kVec];
  int m = 0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float in[3] = {v[0][j], n_inputs<kOp>() > 1 ? v[1][j] : 0.0f, n_inputs<kOp>() > 2 ? v[2][j] : 0.0f};
    float pv[n_values<kOp>()];
    point_values<kDtype, kOp>(in, uses_silu<kOp>() ? sg[j] : fp8t::fp8::SiluOfGate{}, pv);
#pragma unroll
    for (int i = 0; i < n_values<kOp>(); ++i) out[i][j] = pv[i], m = max(m, abs_bits(pv[i]));
  }
  if constexpr (kStore) store_values<kDtype, kOp, kVec>(a, g * kVec, off, out);
  return m;
}

// ---- GELU: skipping what cannot raise the max -----------------------------------------------
// GELU and its backward cost far more arithmetic than the bytes they read, but for every float
// input the computed value is bounded by a cheap one:
//   |gelu(x)| <= |x|: (0.5 x) * (1 + t) with |tanhf| <= 1 is at most |x| before rounding, and
//     rounding (to float, then to the dtype, where |x| is representable) cannot pass |x|;
//   |dy * gelu'(h)| <= 1.13 |dy|: gelu' of the tanh form lies in [-0.13, 1.13]; where tanhf(inner)
//     is not exactly +-1, |h| < 6 and the cancellation in 1 - t^2 costs under 1e-5; an h so large
//     that x^2 overflows gives NaN, which the amax ignores either way.
// So an element whose bound (with a margin: bound_factor) does not exceed the running max of its
// warp cannot change the amax and is not evaluated, and the GELU backward does not even load its
// h. The result is the amax of evaluating every element, bit for bit.
template <int kOp>
constexpr bool skips() {
  return kOp == kGelu || kOp == kDgelu;
}

template <int kOp>
constexpr float bound_factor() {
  return kOp == kGelu ? 1.0009765625f : 1.25f;  // 1 + 2^-10; 1.25 > 1.13
}

// m raised by the elements of vector group g (x values in `first`) whose bound exceeds m.
template <int kDtype, int kOp>
__device__ __forceinline__ int skip_group_bits(const AmaxArgs& a, int64_t g, const Packed128& first, int m) {
  constexpr int kVec = Packed128::elems<kDtype>();
  float x[kVec];
  first.unpack<kDtype>(x);
  unsigned flags = 0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if (abs_bits(x[j] * bound_factor<kOp>()) > m) flags |= 1u << j;
  }
  if (flags == 0) return m;
  float h[kVec];
  if constexpr (kOp == kDgelu) {
    Packed128::ldg(static_cast<const char*>(a.h) + g * 16).unpack<kDtype>(h);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) h[j] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float in[3] = {x[j], h[j], 0.0f};
    if (flags & (1u << j)) m = max(m, value_bits<kDtype, kOp>(in));
  }
  return m;
}

// thread_bits_vec for GELU and its backward. While every lane of the warp has kUnroll groups left
// (a warp-uniform condition, so the shuffles see all 32 lanes), the warp shares its running max
// after each round; the remaining groups and the scalar tail use the lane's own.
template <int kDtype, int kOp>
__device__ __forceinline__ int thread_bits_skip(const AmaxArgs& a) {
  constexpr int kVec = Packed128::elems<kDtype>();
  constexpr int kUnroll = 4;
  const GridStride gs(a.n / kVec);
  const int64_t groups = gs.groups, stride = gs.stride, tid = gs.tid;
  const char* x = static_cast<const char*>(a.x);
  int m = 0;
  int64_t g = tid;
  for (int64_t last_lane = tid - (threadIdx.x & 31) + 31; last_lane + (kUnroll - 1) * stride < groups;
       last_lane += kUnroll * stride, g += kUnroll * stride) {
    Packed128 q[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) q[u] = Packed128::ldg(x + (g + u * stride) * 16);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) m = skip_group_bits<kDtype, kOp>(a, g + u * stride, q[u], m);
    m = warp_max_int(m);
  }
  for (; g < groups; g += stride) m = skip_group_bits<kDtype, kOp>(a, g, Packed128::ldg(x + g * 16), m);
  for (int64_t p = groups * kVec + tid; p < a.n; p += stride) {
    m = max(m, point_bits<kDtype, kOp, false>(a, OpSilu<kDtype, kOp>{}, p));
  }
  return m;
}

// ---- SwiGLU without its value: skipping by bounds ----------------------------------------------
// The same scheme for the SwiGLU ops when the value is not written, with swiglu_math.h's bounds
// (swiglu_bound, swiglu_backward_bound: kSwigluBoundFactor times |up| max(|gate|, 0.28), or |dy|
// max(|gate|, |up|, 0.28)): every input is read (the bound needs them all), and a point is
// evaluated only where its bound may raise the running max. Once a warp's max has grown few points
// are (1.7% in a host simulation on normal inputs), so the pass runs near the speed of its loads
// instead of its arithmetic (3.9 TB/s on the H200 at the LLaMA-1B size, docs/benchmarks.md).

// m raised by the points of vector group g (inputs in q, as load_group read them) whose bound
// may raise it.
template <int kDtype, int kOp>
__device__ __forceinline__ int bounded_group_bits(const Packed128 (&q)[3], int m) {
  constexpr int kVec = Packed128::elems<kDtype>();
  float v[3][kVec];
#pragma unroll
  for (int i = 0; i < n_inputs<kOp>(); ++i) q[i].unpack<kDtype>(v[i]);
  const float mf = __int_as_float(m);
  unsigned flags = 0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float b = kOp == kDswiglu ? fp8t::fp8::swiglu_backward_bound(v[0][j], v[1][j], v[2][j])
                                    : fp8t::fp8::swiglu_bound(v[0][j], v[1][j]);
    if (fp8t::fp8::bound_may_raise(b, mf)) flags |= 1u << j;
  }
  if (flags == 0) return m;
  const FormulaSilu<kDtype> silu;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if (!(flags & (1u << j))) continue;
    const float in[3] = {v[0][j], v[1][j], n_inputs<kOp>() > 2 ? v[2][j] : 0.0f};
    float pv[n_values<kOp>()];
    point_values<kDtype, kOp>(in, silu(in[gate_input<kOp>()]), pv);
    m = max(m, max_abs_bits<kOp>(pv));
  }
  return m;
}

// thread_bits_vec for the SwiGLU ops without their value: kUnroll groups' loads in flight, the
// running max shared across the warp after each round while every lane has kUnroll groups left
// (as thread_bits_skip), then the remaining groups and the scalar tail (by the formula).
template <int kDtype, int kOp>
__device__ __forceinline__ int thread_bits_bounded(const AmaxArgs& a) {
  constexpr int kVec = Packed128::elems<kDtype>();
  constexpr int kUnroll = unroll<kOp>();
  const GridStride gs(a.n / kVec);
  const int64_t groups = gs.groups, stride = gs.stride, tid = gs.tid;
  int m = 0;
  int64_t g = tid;
  for (int64_t last_lane = tid - (threadIdx.x & 31) + 31; last_lane + (kUnroll - 1) * stride < groups;
       last_lane += kUnroll * stride, g += kUnroll * stride) {
    Packed128 q[kUnroll][3];
    int64_t off[kUnroll][3];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_group<kDtype, kOp>(a, g + u * stride, q[u], off[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) m = bounded_group_bits<kDtype, kOp>(q[u], m);
    m = warp_max_int(m);
  }
  for (; g < groups; g += stride) {
    Packed128 q[3];
    int64_t off[3];
    load_group<kDtype, kOp>(a, g, q, off);
    m = bounded_group_bits<kDtype, kOp>(q, m);
  }
  const FormulaSilu<kDtype> silu;
  for (int64_t p = groups * kVec + tid; p < a.n; p += stride) m = max(m, point_bits<kDtype, kOp, false>(a, silu, p));
  return m;
}

// This thread's max over its vector groups (grid-stride, kUnroll groups' loads issued before the
// first is evaluated), then over the scalar tail points n_groups * kVec .. n.
template <int kDtype, int kOp, bool kStore>
__device__ __forceinline__ int thread_bits_vec(const AmaxArgs& a, const OpSilu<kDtype, kOp>& silu) {
  constexpr int kVec = Packed128::elems<kDtype>();
  constexpr int kUnroll = unroll<kOp>();
  const GridStride gs(a.n / kVec);
  const int64_t groups = gs.groups, stride = gs.stride, tid = gs.tid;
  int m = 0;
  int64_t g = tid;
  for (; g + (kUnroll - 1) * stride < groups; g += kUnroll * stride) {
    Packed128 q[kUnroll][3];
    int64_t off[kUnroll][3];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_group<kDtype, kOp>(a, g + u * stride, q[u], off[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      m = max(m, group_bits<kDtype, kOp, kStore>(a, silu, g + u * stride, q[u], off[u]));
    }
  }
  for (; g < groups; g += stride) {
    Packed128 q[3];
    int64_t off[3];
    load_group<kDtype, kOp>(a, g, q, off);
    m = max(m, group_bits<kDtype, kOp, kStore>(a, silu, g, q, off));
  }
  for (int64_t p = groups * kVec + tid; p < a.n; p += stride) m = max(m, point_bits<kDtype, kOp, kStore>(a, silu, p));
  return m;
}

template <int kDtype, int kOp, bool kStore, typename Silu>
__device__ __forceinline__ int thread_bits_scalar(const AmaxArgs& a, const Silu& silu) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int m = 0;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < a.n; p += stride) {
    m = max(m, point_bits<kDtype, kOp, kStore>(a, silu, p));
  }
  return m;
}

// Block max -> one atomicMax per CTA; the last CTA (ticket) publishes the amax and the scale and
// leaves the workspace zero. Every thread of the block calls it.
__device__ __forceinline__ void commit_and_finish(int v, const AmaxArgs& a) {
  __shared__ int warp_max[kThreads / 32];
  v = warp_max_int(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) v = max(v, warp_max[w]);
  int* accumulator = reinterpret_cast<int*>(a.ws);
  if (v > 0) atomicMax(accumulator, v);
  __threadfence();  // this CTA's max is visible before its ticket
  if (atomicAdd(a.ws + 1, 1u) != gridDim.x - 1) return;
  const float amax = __int_as_float(atomicExch(accumulator, 0));
  atomicExch(a.ws + 1, 0u);
  *a.amax = amax;
  if (a.scale != nullptr) {
    const float s = fp8t::fp8::current_scale(amax, a.fp8_max, a.two_pow_margin);
    *a.scale = s;
    *a.scale_inv = 1.0f / s;
  }
}

template <int kDtype, int kOp, bool kStore>
__global__ void __launch_bounds__(kThreads) amax_kernel(const AmaxArgs a) {
  static_assert(valid_store<kOp, kStore>(), "only the SwiGLU ops write their value");
  extern __shared__ __align__(16) unsigned char table_smem[];  // op_smem_bytes<kDtype, kOp, kStore>()
  int v;
  if constexpr (skips_by_bound<kOp, kStore>()) {
    v = a.vec ? thread_bits_bounded<kDtype, kOp>(a) : thread_bits_scalar<kDtype, kOp, false>(a, FormulaSilu<kDtype>{});
  } else {
    OpSilu<kDtype, kOp> silu{};
    if constexpr (uses_silu<kOp>()) silu = build_gate_silu<kDtype, kOp == kDswiglu>(table_smem);
    if (!a.vec) {
      v = thread_bits_scalar<kDtype, kOp, kStore>(a, silu);
    } else if constexpr (skips<kOp>()) {
      v = thread_bits_skip<kDtype, kOp>(a);  // a skipped element is not evaluated: never kStore
    } else {
      v = thread_bits_vec<kDtype, kOp, kStore>(a, silu);
    }
  }
  commit_and_finish(v, a);
}

template <typename F>
void dispatch_op(int op, F&& f) {
  switch (op) {
    case kGelu: f(IntTag<kGelu>{}); break;
    case kDgelu: f(IntTag<kDgelu>{}); break;
    case kSwiglu: f(IntTag<kSwiglu>{}); break;
    case kDswiglu: f(IntTag<kDswiglu>{}); break;
    default: f(IntTag<kNone>{}); break;
  }
}

// CTAs: one thread per vector group (or point) at most, a few CTAs per SM at most, at least 1 (an
// empty tensor still publishes amax 0 and its scale).
unsigned grid_size(int64_t work) {
  const int64_t cap = static_cast<int64_t>(sm_count()) * kCtasPerSm;
  int64_t g = (work + kThreads - 1) / kThreads;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

namespace {

// One launch with `smem` bytes of dynamic shared memory (the SwiGLU ops' table); a failed opt-in
// is left for the launcher's cudaGetLastError (the launch then fails too).
template <auto kKernel>
void launch_amax(unsigned grid, size_t smem, cudaStream_t stream, const AmaxArgs& args) {
  (void)allow_dynamic_smem<kKernel>(smem);
  kKernel<<<grid, kThreads, smem, stream>>>(args);
}

// The checks and the launch behind both launchers (`launcher` names the entry point in a failed
// check); want_value (SwiGLU ops only) also writes the value to out.
cudaError_t amax_scale_impl(const char* launcher, int act, const void* x, const void* h, int dtype, int64_t rows,
                            int64_t cols, bool want_value, void* out, float* amax, unsigned int* workspace,
                            float fp8_max, float two_pow_margin, float* scale, float* scale_inv, cudaStream_t stream) {
  FP8T_LAUNCHER(launcher);
  FP8T_KERNEL_REQUIRE(act == kNone || act == kGelu || act == kDgelu || act == kSwiglu || act == kDswiglu,
                      "unknown activation code");
  FP8T_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(amax != nullptr && workspace != nullptr, "no amax or workspace");
  FP8T_KERNEL_REQUIRE(aligned(workspace, 4), "the workspace is not 4-byte aligned");
  const int64_t n = rows * cols;
  FP8T_KERNEL_REQUIRE(n == 0 || x != nullptr, "no input for a nonempty tensor");
  const bool two_tensors = act == kDgelu || act == kDswiglu;
  FP8T_KERNEL_REQUIRE(n == 0 || !two_tensors || h != nullptr, "no activation input h for a backward");
  FP8T_KERNEL_REQUIRE((scale == nullptr) == (scale_inv == nullptr), "scale and scale_inv must be given together");
  FP8T_KERNEL_REQUIRE(scale == nullptr || (fp8_max > 0.0f && two_pow_margin > 0.0f),
                      "fp8_max or 2^margin is not positive");
  const bool swiglu = act == kSwiglu || act == kDswiglu;
  FP8T_KERNEL_REQUIRE(!want_value || swiglu, "only the SwiGLU values can be written");
  FP8T_KERNEL_REQUIRE(n == 0 || !want_value || out != nullptr, "no value output for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(n == 0 || !want_value || (out != x && out != h), "the value output is an input");
  if (!want_value) out = nullptr;
  const int vec_elems = dtype == FP8T_DTYPE_F32 ? 4 : 8;
  // Vector loads need every 16-byte group inside one row of gate and up (SwiGLU) and every input
  // 16-byte aligned; the value's vector stores, the output too.
  const bool vec = (!swiglu || cols % vec_elems == 0) && aligned(x, 16) && (!two_tensors || aligned(h, 16)) &&
                   (out == nullptr || aligned(out, 16));
  const AmaxArgs args{x, h, n, cols, amax, workspace, fp8_max, two_pow_margin, scale, scale_inv, out, vec};
  const unsigned grid = grid_size(vec ? n / vec_elems + 1 : n);
  dispatch_op(act, [&](auto op) {
    dispatch_dtype(dtype, [&](auto dt) {
      constexpr int kOp = decltype(op)::value;
      constexpr int kDt = decltype(dt)::value;
      if constexpr (valid_store<kOp, true>()) {
        if (out != nullptr) {
          launch_amax<amax_kernel<kDt, kOp, true>>(grid, op_smem_bytes<kDt, kOp, true>(), stream, args);
          return;
        }
      }
      launch_amax<amax_kernel<kDt, kOp, false>>(grid, op_smem_bytes<kDt, kOp, false>(), stream, args);
    });
  });
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t fp8t_amax_scale(int act, const void* x, const void* h, int dtype, int64_t rows, int64_t cols,
                                       float* amax, unsigned int* workspace, float fp8_max, float two_pow_margin,
                                       float* scale, float* scale_inv, cudaStream_t stream) {
  return amax_scale_impl("fp8t_amax_scale", act, x, h, dtype, rows, cols, false, nullptr, amax, workspace, fp8_max,
                         two_pow_margin, scale, scale_inv, stream);
}

extern "C" cudaError_t fp8t_swiglu_amax_scale_value(int backward, const void* dy, const void* h, int dtype,
                                                    int64_t rows, int64_t cols, void* out, float* amax,
                                                    unsigned int* workspace, float fp8_max, float two_pow_margin,
                                                    float* scale, float* scale_inv, cudaStream_t stream) {
  return amax_scale_impl("fp8t_swiglu_amax_scale_value", backward ? FP8T_ACT_DSWIGLU : FP8T_ACT_SWIGLU,
                         backward ? dy : h, backward ? h : nullptr, dtype, rows, cols, true, out, amax, workspace,
                         fp8_max, two_pow_margin, scale, scale_inv, stream);
}
