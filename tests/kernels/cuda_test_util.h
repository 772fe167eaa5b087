// Helpers of the GPU tests (tests/kernels, tests/gemm): host references built on lib/numerics/format.h
// and comparisons that say where two results differ.
#pragma once

#include <ATen/Context.h>  // at::globalContext (attention backends)
#include <torch/torch.h>   // at::Tensor, torch::cuda::is_available

#include <cmath>    // std::fabs, std::isnan
#include <cstdio>   // std::printf
#include <cstdlib>  // std::getenv
#include <cstring>  // std::memcpy
#include <string>   // std::string

#include "lib/numerics/format.h"        // fp8::encode, fp8::Format
#include "lib/numerics/scaling_math.h"  // fp8::amax_combine
#include "tests/catch.h"                // REQUIRE

namespace fp8t {
namespace test {

// Skips the calling TEST_CASE where there is no GPU. A macro, not a function: under Catch2 v2
// SKIP returns from the function it is written in (tests/catch.h).
#define FP8T_REQUIRE_GPU()                                                                                \
  do {                                                                                                    \
    if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU (ctest runs it only under the `cuda` label)"); \
  } while (0)

// Flash and memory-efficient attention accumulate with atomics in their backward, so two eager
// runs differ in the last bits; the math backend makes the eager step reproducible, which a
// comparison of two trainings needs. While it lives, scaled_dot_product_attention takes its math
// backend only.
class MathAttentionOnly {
 public:
  MathAttentionOnly()
      : flash_(at::globalContext().userEnabledFlashSDP()),
        mem_(at::globalContext().userEnabledMemEfficientSDP()),
        cudnn_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseFlash(false);
    at::globalContext().setSDPUseMemEfficient(false);
    at::globalContext().setSDPUseCuDNN(false);
  }
  ~MathAttentionOnly() {
    at::globalContext().setSDPUseFlash(flash_);
    at::globalContext().setSDPUseMemEfficient(mem_);
    at::globalContext().setSDPUseCuDNN(cudnn_);
  }

 private:
  bool flash_, mem_, cudnn_;
};

inline at::TensorOptions on_cuda(at::ScalarType t) { return at::TensorOptions().dtype(t).device(at::kCUDA); }

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Codes of fp8(x * scale) by the reference codec, computed on the host in float32 like the GPU.
inline at::Tensor host_encode(const at::Tensor& x, float scale, fp8::Format f) {
  const at::Tensor xf = x.to(at::kFloat).cpu().contiguous();
  at::Tensor out = at::empty(xf.sizes(), at::kByte);
  const float* src = xf.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < xf.numel(); ++i) dst[i] = fp8::encode(src[i] * scale, f);
  return out;
}

// max|x| ignoring NaN elements, max-accumulated onto `init` (what the cast kernels do to *amax).
inline float host_amax(const at::Tensor& x, float init) {
  const at::Tensor xf = x.to(at::kFloat).cpu().contiguous();
  const float* p = xf.data_ptr<float>();
  float m = init;
  for (int64_t i = 0; i < xf.numel(); ++i) m = fp8::amax_combine(m, std::fabs(p[i]));
  return m;
}

// Flat index of the first differing byte of two uint8 tensors of one shape, or -1.
inline int64_t first_mismatch(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.cpu().contiguous(), w = want.cpu().contiguous();
  if (g.numel() != w.numel()) return 0;
  const uint8_t* a = g.data_ptr<uint8_t>();
  const uint8_t* b = w.data_ptr<uint8_t>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (a[i] != b[i]) return i;
  }
  return -1;
}

// Checks two code tensors bit for bit and reports the first difference.
inline void require_same_codes(const at::Tensor& got, const at::Tensor& want, const at::Tensor& x_flat,
                               float scale) {
  REQUIRE(got.sizes() == want.sizes());
  const int64_t i = first_mismatch(got, want);
  if (i >= 0) {
    const at::Tensor xf = x_flat.to(at::kFloat).cpu().contiguous().view({-1});
    const float xv = i < xf.numel() ? xf.data_ptr<float>()[i] : 0.0f;
    INFO("first mismatch at flat index " << i << ": x=" << xv << " (bits 0x" << std::hex << bits_of(xv)
         << "), x*scale=" << xv * scale << ", got 0x" << int(got.cpu().contiguous().view({-1})[i].item<uint8_t>())
         << ", want 0x" << int(want.cpu().contiguous().view({-1})[i].item<uint8_t>()));
    REQUIRE(i < 0);
  }
}

// Same float bits (so NaN == NaN and -0 != +0).
inline bool same_bits(float a, float b) { return bits_of(a) == bits_of(b); }

// ||got - want||_F / ||want||_F in float64.
inline double rel_frobenius(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble).cpu(), w = want.to(at::kDouble).cpu();
  const double denom = w.norm().item<double>();
  const double num = (g - w).norm().item<double>();
  return denom > 0 ? num / denom : num;
}

// Numbers worth seeing in a GPU run's log (set FP8T_TEST_REPORT=1; scripts/device-test.sh does).
inline bool reporting() { return std::getenv("FP8T_TEST_REPORT") != nullptr; }

// Under compute-sanitizer (FP8T_TEST_SMALL=1, scripts/device-test.sh) large problems are skipped:
// the tools slow kernels down by 10-100x and small shapes reach the same code paths.
inline bool sanitizer_run() { return std::getenv("FP8T_TEST_SMALL") != nullptr; }
inline bool skip_large(int64_t numel) { return sanitizer_run() && numel > (int64_t{1} << 18); }

inline std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

}  // namespace test
}  // namespace fp8t
