// References of the SwiGLU tests (tests/fp8/backends/test_swiglu*.cpp, tests/kernels/test_swiglu_cast.cpp):
// the unfused LibTorch composition the model runs, and lib/numerics/swiglu_math.h evaluated on the
// host element by element (what the CUDA kernels evaluate).
#pragma once

#include <ATen/Version.h>       // at::get_cpu_capability
#include <c10/util/BFloat16.h>  // c10::BFloat16
#include <torch/torch.h>        // at::Tensor, autograd

#include <string>  // std::string

#include "lib/numerics/swiglu_math.h"  // swiglu, swiglu_backward

namespace fp8t {
namespace test {

// The rounding of one activation dtype (swiglu_math.h's Round) on the host.
struct Bf16Round {
  float operator()(float v) const { return static_cast<float>(c10::BFloat16(v)); }
};

// y = at::silu(gate) * up of h = [gate | up] (the model's Activation kSwiGLU).
inline at::Tensor unfused_swiglu(const at::Tensor& h) {
  const auto parts = h.chunk(2, -1);
  return at::silu(parts[0]) * parts[1];
}

// The gradient of h that autograd computes through unfused_swiglu for the incoming dy.
inline at::Tensor unfused_swiglu_backward(const at::Tensor& dy, const at::Tensor& h) {
  const at::Tensor hv = h.detach().clone().requires_grad_();
  unfused_swiglu(hv).backward(dy.to(h.scalar_type()));
  return hv.grad();
}

// swiglu_math.h on the host, element by element, for a CPU h [rows, 2F] (fp32 or bf16): y
// [rows, F] in h's dtype.
inline at::Tensor math_swiglu(const at::Tensor& h) {
  const int64_t rows = h.size(0), f = h.size(1) / 2;
  const at::Tensor hf = h.to(at::kFloat).contiguous();
  at::Tensor y = at::empty({rows, f}, at::kFloat);
  const float* hp = hf.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool bf16 = h.scalar_type() == at::kBFloat16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < f; ++c) {
      const float g = hp[r * 2 * f + c], u = hp[r * 2 * f + f + c];
      yp[r * f + c] = bf16 ? fp8::swiglu(g, u, Bf16Round{}) : fp8::swiglu(g, u, fp8::IdentityRound{});
    }
  }
  return y.to(h.scalar_type());
}

// swiglu_math.h's backward on the host: dh [rows, 2F] = [dgate | dup] in h's dtype.
inline at::Tensor math_swiglu_backward(const at::Tensor& dy, const at::Tensor& h) {
  const int64_t rows = h.size(0), f = h.size(1) / 2;
  const at::Tensor hf = h.to(at::kFloat).contiguous();
  const at::Tensor dyf = dy.to(h.scalar_type()).to(at::kFloat).contiguous();
  at::Tensor dh = at::empty({rows, 2 * f}, at::kFloat);
  const float* hp = hf.data_ptr<float>();
  const float* dp = dyf.data_ptr<float>();
  float* out = dh.data_ptr<float>();
  const bool bf16 = h.scalar_type() == at::kBFloat16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < f; ++c) {
      const float d = dp[r * f + c], g = hp[r * 2 * f + c], u = hp[r * 2 * f + f + c];
      const fp8::SwigluGrad gr = bf16 ? fp8::swiglu_backward(d, g, u, Bf16Round{})
                                      : fp8::swiglu_backward(d, g, u, fp8::IdentityRound{});
      out[r * 2 * f + c] = gr.gate;
      out[r * 2 * f + f + c] = gr.up;
    }
  }
  return dh.to(h.scalar_type());
}

// Number of elements whose float bits differ (NaN == NaN whatever the payload), and the first one.
// h = [gate | up] of 65536 / f rows whose gates are every bf16 value once (bit patterns 0 ..
// 0xFFFF in order: zeros, subnormals, each binade, inf and the NaNs) and whose up values are
// 3 * N(0, 1): the silu table of kernels/silu_table.cuh and each of its closed forms, on the GPU.
// f divides 65536.
inline at::Tensor every_bf16_gate_h(int64_t f) {
  const int64_t rows = 65536 / f;
  const at::Tensor gate = at::arange(65536, at::kInt).bitwise_left_shift(16).view(at::kFloat).view({rows, f});
  at::manual_seed(65536 + f);
  return at::cat({gate, at::randn({rows, f}) * 3.0}, 1).to(at::kBFloat16);
}

// The incoming gradient for every_bf16_gate_h(f): [65536 / f, f] bf16 spread over 2^-8 .. 2^8.
inline at::Tensor every_bf16_gate_dy(int64_t f) {
  const int64_t rows = 65536 / f;
  at::manual_seed(7 * f);
  return (at::randn({rows, f}) * at::pow(2.0, at::randint(-8, 8, {rows, f}))).to(at::kBFloat16);
}

struct BitDiff {
  int64_t count = 0;
  int64_t first = -1;
};

inline BitDiff bit_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kFloat).contiguous(), y = b.to(at::kFloat).contiguous();
  const at::Tensor xi = x.view(at::kInt), yi = y.view(at::kInt);
  const at::Tensor differ = xi.ne(yi).logical_and(x.isnan().logical_and(y.isnan()).logical_not());
  BitDiff d;
  d.count = differ.sum().item<int64_t>();
  if (d.count > 0) d.first = differ.view({-1}).nonzero()[0][0].item<int64_t>();
  return d;
}

// Whether ATen's CPU silu kernels run their vector loop with the vectorised exp (x86 builds with
// AVX2 or AVX-512; "NO AVX" falls back to std::exp everywhere).
inline bool aten_cpu_uses_vector_exp() {
  const std::string cap = at::get_cpu_capability();
  return cap == "AVX2" || cap == "AVX512";
}

}  // namespace test
}  // namespace fp8t
