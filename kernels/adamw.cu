// AdamW over many tensors, with FP32 or bfloat16 moments (train.moments_dtype).
//
// The arithmetic is lib/numerics/adamw_math.h (shared with the CPU loop); this file maps elements
// onto threads. Multi-tensor: the tensors' pointers travel in the kernel arguments (TensorList, up
// to kMaxTensors per launch), never through a device table, so a step captured in a CUDA graph
// replays without a host-to-device copy and each step's freshly allocated gradients need none
// either. Each launch is a pair: a one-block prologue advances every tensor's {t, beta1^t,
// beta2^t}, then one block per chunk of kChunk elements updates them (reading the advanced
// state). The update moves 28 bytes per element with FP32 moments (p and g 4 + 4 read, p 4
// written; m and v 4 + 4 read and written), 20 with bf16 ones: 16-byte accesses for p and g,
// 16-byte (fp32) or 8-byte (4 bf16) ones for m and v.
#include <stdint.h>  // uint16_t, int64_t

#include "fp8t_optimizer_kernels.h"   // the C API
#include "lib/numerics/adamw_math.h"  // fp8t::train::adamw::update_element, advance_state
#include "packed.cuh"                 // Packed (16- and 8-byte accesses)
#include "precondition.cuh"           // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE, aligned

namespace {

namespace adamw = fp8t::train::adamw;
using fp8t::kern::Packed;

constexpr int kMaxTensors = 48;  // keeps TensorList (2.6 KB) inside the 4 KB of kernel arguments
constexpr int kThreads = 256;
constexpr int kVec = 4;                       // elements per vector access
constexpr int kChunk = kThreads * kVec * 4;   // elements per block: 4 vector iterations per thread

// Moment: float (fp32 moments) or uint16_t (bf16 bits).
template <typename Moment>
struct TensorList {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  Moment* exp_avg[kMaxTensors];
  Moment* exp_avg_sq[kMaxTensors];
  float* state[kMaxTensors];
  int64_t numel[kMaxTensors];
  int first_block[kMaxTensors + 1];  // blocks [first_block[i], first_block[i + 1]) update tensor i
  unsigned char vectorized[kMaxTensors];  // all four arrays aligned for the vector accesses
  int n;
};

// ---- kernels --------------------------------------------------------------------------------

template <typename Moment>
__global__ void advance_states_kernel(TensorList<Moment> t, adamw::Constants c, const float* found_inf) {
  const int i = threadIdx.x;
  if (i >= t.n || adamw::skip_step(found_inf)) return;
  adamw::advance_state(t.state[i], c);
}

// Four consecutive moments as floats, and back (fp32: one 16-byte access; bf16: one 8-byte one).
struct MomentVector {
  float f[kVec];
  __device__ __forceinline__ static MomentVector load(const float* m) {
    const Packed<16> w = Packed<16>::load(m);
    MomentVector r;
#pragma unroll
    for (int j = 0; j < kVec; ++j) r.f[j] = __uint_as_float(w.w[j]);
    return r;
  }
  __device__ __forceinline__ static MomentVector load(const uint16_t* m) {
    const Packed<8> w = Packed<8>::load(m);
    MomentVector r;
#pragma unroll
    for (int j = 0; j < kVec; ++j) r.f[j] = adamw::bf16_value(static_cast<uint16_t>(w.w[j / 2] >> (16 * (j & 1))));
    return r;
  }
  __device__ __forceinline__ void store(float* m) const {
    Packed<16> w;
#pragma unroll
    for (int j = 0; j < kVec; ++j) w.w[j] = __float_as_uint(f[j]);
    w.store(m);
  }
  __device__ __forceinline__ void store(uint16_t* m) const {
    Packed<8> w;
#pragma unroll
    for (int j = 0; j < kVec; j += 2) {
      w.w[j / 2] = static_cast<uint32_t>(adamw::bf16_bits(f[j])) |
                   (static_cast<uint32_t>(adamw::bf16_bits(f[j + 1])) << 16);
    }
    w.store(m);
  }
};

// Four consecutive elements, starting at a multiple of 4 of a vectorized tensor. The moments go
// through float registers: update_element<float> on the widened values, then store() rounds them
// as update_element<uint16_t> would.
template <typename Moment>
__device__ __forceinline__ void update_vector(float* p, const float* g, Moment* m, Moment* v, int64_t e,
                                              const adamw::Constants& c, const adamw::StepScalars& s,
                                              bool has_scale, float scale) {
  Packed<16> pw = Packed<16>::load(p + e);
  const Packed<16> gw = Packed<16>::ldg(g + e);
  MomentVector mv = MomentVector::load(m + e);
  MomentVector vv = MomentVector::load(v + e);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    float pj = __uint_as_float(pw.w[j]);
    const float gj = adamw::scaled_grad(__uint_as_float(gw.w[j]), has_scale, scale);
    adamw::update_element(pj, gj, mv.f[j], vv.f[j], c, s);
    pw.w[j] = __float_as_uint(pj);
  }
  pw.store(p + e);
  mv.store(m + e);
  vv.store(v + e);
}

template <typename Moment>
__global__ void __launch_bounds__(kThreads) adamw_kernel(TensorList<Moment> t, adamw::Constants c, const float* lr,
                                                         float lr_value, const float* grad_scale,
                                                         const float* found_inf) {
  if (adamw::skip_step(found_inf)) return;
  const int block = static_cast<int>(blockIdx.x);
  int i = 0;
  while (i + 1 < t.n && block >= t.first_block[i + 1]) ++i;
  const int64_t begin = static_cast<int64_t>(block - t.first_block[i]) * kChunk;
  const int64_t end = begin + kChunk < t.numel[i] ? begin + kChunk : t.numel[i];
  const adamw::StepScalars s = adamw::step_scalars(t.state[i], lr != nullptr ? *lr : lr_value, c.weight_decay);
  const bool has_scale = grad_scale != nullptr;
  const float scale = has_scale ? *grad_scale : 1.0f;
  float* p = t.param[i];
  const float* g = t.grad[i];
  Moment* m = t.exp_avg[i];
  Moment* v = t.exp_avg_sq[i];
  int64_t scalar_from = begin;
  if (t.vectorized[i]) {
    const int64_t vector_end = begin + (end - begin) / kVec * kVec;
    for (int64_t e = begin + static_cast<int64_t>(threadIdx.x) * kVec; e < vector_end; e += kThreads * kVec) {
      update_vector(p, g, m, v, e, c, s, has_scale, scale);
    }
    scalar_from = vector_end;
  }
  for (int64_t e = scalar_from + threadIdx.x; e < end; e += kThreads) {
    adamw::update_element(p[e], adamw::scaled_grad(g[e], has_scale, scale), m[e], v[e], c, s);
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

namespace {

// fp8t_launcher_: the FP8T_LAUNCHER of the C entry point (named in precondition messages).
template <typename Moment>
cudaError_t launch_adamw(const char* const fp8t_launcher_, int n_tensors, float* const* params,
                         const float* const* grads, Moment* const* exp_avgs, Moment* const* exp_avg_sqs,
                         float* const* states, const int64_t* numels, const float* lr,
                         float lr_value, float beta1, float beta2, float eps, float weight_decay,
                         const float* grad_scale, const float* found_inf, cudaStream_t stream) {
  using fp8t::kern::aligned;
  constexpr int kMomentBytes = static_cast<int>(sizeof(Moment));
  FP8T_KERNEL_REQUIRE(n_tensors >= 0, "a negative number of tensors");
  if (n_tensors == 0) return cudaSuccess;
  FP8T_KERNEL_REQUIRE(params != nullptr && grads != nullptr && exp_avgs != nullptr && exp_avg_sqs != nullptr &&
                          states != nullptr && numels != nullptr,
                      "a null array of tensors");
  for (int i = 0; i < n_tensors; ++i) {
    FP8T_KERNEL_REQUIRE(numels[i] >= 0, "a tensor with a negative number of elements");
    FP8T_KERNEL_REQUIRE(states[i] != nullptr && aligned(states[i], 4), "a null or misaligned state");
    FP8T_KERNEL_REQUIRE(numels[i] == 0 || (params[i] != nullptr && grads[i] != nullptr && exp_avgs[i] != nullptr &&
                                           exp_avg_sqs[i] != nullptr),
                        "a null parameter, gradient or moment");
    FP8T_KERNEL_REQUIRE(aligned(params[i], 4) && aligned(grads[i], 4) && aligned(exp_avgs[i], kMomentBytes) &&
                            aligned(exp_avg_sqs[i], kMomentBytes),
                        "a parameter, gradient or moment not aligned to its element size");
    FP8T_KERNEL_REQUIRE((numels[i] + kChunk - 1) / kChunk < (int64_t{1} << 30), "a tensor of over 2^42 elements");
  }
  const adamw::Constants c = adamw::make_constants(beta1, beta2, eps, weight_decay);
  for (int first = 0; first < n_tensors; first += kMaxTensors) {
    TensorList<Moment> t{};
    t.n = n_tensors - first < kMaxTensors ? n_tensors - first : kMaxTensors;
    int64_t blocks = 0;
    for (int k = 0; k < t.n; ++k) {
      const int i = first + k;
      t.param[k] = params[i];
      t.grad[k] = grads[i];
      t.exp_avg[k] = exp_avgs[i];
      t.exp_avg_sq[k] = exp_avg_sqs[i];
      t.state[k] = states[i];
      t.numel[k] = numels[i];
      t.vectorized[k] = aligned(params[i], 16) && aligned(grads[i], 16) && aligned(exp_avgs[i], kVec * kMomentBytes) &&
                        aligned(exp_avg_sqs[i], kVec * kMomentBytes);
      t.first_block[k] = static_cast<int>(blocks);
      blocks += (numels[i] + kChunk - 1) / kChunk;
      FP8T_KERNEL_REQUIRE(blocks < (int64_t{1} << 31), "more than 2^31 - 1 blocks in one launch");
    }
    t.first_block[t.n] = static_cast<int>(blocks);
    advance_states_kernel<<<1, kMaxTensors, 0, stream>>>(t, c, found_inf);
    if (blocks > 0) {
      adamw_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(t, c, lr, lr_value, grad_scale, found_inf);
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace

extern "C" cudaError_t fp8t_adamw_fp32_moments(int n_tensors, float* const* params, const float* const* grads,
                                               float* const* exp_avgs, float* const* exp_avg_sqs,
                                               float* const* states, const int64_t* numels, const float* lr,
                                               float lr_value, float beta1, float beta2, float eps,
                                               float weight_decay, const float* grad_scale, const float* found_inf,
                                               cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_adamw_fp32_moments");
  return launch_adamw(fp8t_launcher_, n_tensors, params, grads, exp_avgs, exp_avg_sqs, states, numels, lr, lr_value,
                      beta1, beta2, eps, weight_decay, grad_scale, found_inf, stream);
}

extern "C" cudaError_t fp8t_adamw_bf16_moments(int n_tensors, float* const* params, const float* const* grads,
                                               uint16_t* const* exp_avgs, uint16_t* const* exp_avg_sqs,
                                               float* const* states, const int64_t* numels, const float* lr,
                                               float lr_value, float beta1, float beta2, float eps,
                                               float weight_decay, const float* grad_scale, const float* found_inf,
                                               cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_adamw_bf16_moments");
  return launch_adamw(fp8t_launcher_, n_tensors, params, grads, exp_avgs, exp_avg_sqs, states, numels, lr, lr_value,
                      beta1, beta2, eps, weight_decay, grad_scale, found_inf, stream);
}
