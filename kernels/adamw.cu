// AdamW with bfloat16 moments over many tensors (train.moments_dtype: bf16).
//
// The arithmetic is lib/train/adamw_math.h (shared with the CPU loop); this file maps elements
// onto threads. Multi-tensor: the tensors' pointers travel in the kernel arguments (TensorList, up
// to kMaxTensors per launch), never through a device table, so a step captured in a CUDA graph
// replays without a host-to-device copy and each step's freshly allocated gradients need none
// either. Each launch is a pair: a one-block prologue advances every tensor's {t, beta1^t,
// beta2^t}, then one block per chunk of kChunk elements updates them (reading the advanced
// state). The update moves 20 bytes per element (p and g 4 + 4 read, p 4 written; m and v 2 + 2
// read and written): 16-byte accesses for p and g, 8-byte ones (4 bf16) for m and v.
#include <stdint.h>  // uint16_t, int64_t

#include "fp8t_optimizer_kernels.h"  // the C API
#include "lib/train/adamw_math.h"    // fp8t::train::adamw::update_element, advance_state
#include "packed.cuh"                // Packed (16- and 8-byte accesses)
#include "precondition.cuh"          // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE, aligned

namespace {

namespace adamw = fp8t::train::adamw;
using fp8t::kern::Packed;

constexpr int kMaxTensors = 48;  // keeps TensorList (2.6 KB) inside the 4 KB of kernel arguments
constexpr int kThreads = 256;
constexpr int kVec = 4;                       // elements per vector access
constexpr int kChunk = kThreads * kVec * 4;   // elements per block: 4 vector iterations per thread

struct TensorList {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  uint16_t* exp_avg[kMaxTensors];
  uint16_t* exp_avg_sq[kMaxTensors];
  float* state[kMaxTensors];
  int64_t numel[kMaxTensors];
  int first_block[kMaxTensors + 1];  // blocks [first_block[i], first_block[i + 1]) update tensor i
  unsigned char vectorized[kMaxTensors];  // all four arrays aligned for the vector accesses
  int n;
};

// ---- kernels --------------------------------------------------------------------------------

__global__ void advance_states_kernel(TensorList t, adamw::Constants c, const float* found_inf) {
  const int i = threadIdx.x;
  if (i >= t.n || adamw::skip_step(found_inf)) return;
  adamw::advance_state(t.state[i], c);
}

// Four consecutive elements, starting at a multiple of 4 of a vectorized tensor.
__device__ __forceinline__ void update_vector(float* p, const float* g, uint16_t* m, uint16_t* v, int64_t e,
                                              const adamw::Constants& c, const adamw::StepScalars& s,
                                              bool has_scale, float scale) {
  Packed<16> pw = Packed<16>::load(p + e);
  const Packed<16> gw = Packed<16>::ldg(g + e);
  Packed<8> mw = Packed<8>::load(m + e);
  Packed<8> vw = Packed<8>::load(v + e);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    float pj = __uint_as_float(pw.w[j]);
    const float gj = adamw::scaled_grad(__uint_as_float(gw.w[j]), has_scale, scale);
    const int shift = 16 * (j & 1);
    uint16_t mj = static_cast<uint16_t>(mw.w[j / 2] >> shift);
    uint16_t vj = static_cast<uint16_t>(vw.w[j / 2] >> shift);
    adamw::update_element(pj, gj, mj, vj, c, s);
    pw.w[j] = __float_as_uint(pj);
    mw.w[j / 2] = (mw.w[j / 2] & (0xffff0000u >> shift)) | (static_cast<uint32_t>(mj) << shift);
    vw.w[j / 2] = (vw.w[j / 2] & (0xffff0000u >> shift)) | (static_cast<uint32_t>(vj) << shift);
  }
  pw.store(p + e);
  mw.store(m + e);
  vw.store(v + e);
}

__global__ void __launch_bounds__(kThreads) adamw_bf16_kernel(TensorList t, adamw::Constants c, const float* lr,
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
  uint16_t* m = t.exp_avg[i];
  uint16_t* v = t.exp_avg_sq[i];
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

extern "C" cudaError_t fp8t_adamw_bf16_moments(int n_tensors, float* const* params, const float* const* grads,
                                               uint16_t* const* exp_avgs, uint16_t* const* exp_avg_sqs,
                                               float* const* states, const int64_t* numels, const float* lr,
                                               float lr_value, float beta1, float beta2, float eps,
                                               float weight_decay, const float* grad_scale, const float* found_inf,
                                               cudaStream_t stream) {
  using fp8t::kern::aligned;
  FP8T_LAUNCHER("fp8t_adamw_bf16_moments");
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
    FP8T_KERNEL_REQUIRE(aligned(params[i], 4) && aligned(grads[i], 4) && aligned(exp_avgs[i], 2) &&
                            aligned(exp_avg_sqs[i], 2),
                        "a parameter, gradient or moment not aligned to its element size");
    FP8T_KERNEL_REQUIRE((numels[i] + kChunk - 1) / kChunk < (int64_t{1} << 30), "a tensor of over 2^42 elements");
  }
  const adamw::Constants c = adamw::make_constants(beta1, beta2, eps, weight_decay);
  for (int first = 0; first < n_tensors; first += kMaxTensors) {
    TensorList t{};
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
      t.vectorized[k] = aligned(params[i], 16) && aligned(grads[i], 16) && aligned(exp_avgs[i], 8) &&
                        aligned(exp_avg_sqs[i], 8);
      t.first_block[k] = static_cast<int>(blocks);
      blocks += (numels[i] + kChunk - 1) / kChunk;
      FP8T_KERNEL_REQUIRE(blocks < (int64_t{1} << 31), "more than 2^31 - 1 blocks in one launch");
    }
    t.first_block[t.n] = static_cast<int>(blocks);
    advance_states_kernel<<<1, kMaxTensors, 0, stream>>>(t, c, found_inf);
    if (blocks > 0) {
      adamw_bf16_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(t, c, lr, lr_value, grad_scale,
                                                                                found_inf);
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}
