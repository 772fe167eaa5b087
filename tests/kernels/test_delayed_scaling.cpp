// kernels/delayed_scaling.cu (through CudaBackend::update_scaling): bit-exact against
// scaling_math.h's update_slot on the host over a scripted sequence of amaxes.
#if defined(FP8T_WITH_CUDA)

#include <cfloat>  // FLT_MAX
#include <cmath>   // std::ldexp
#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

#include "lib/fp8/backends/cuda_backend.h"  // cuda_backend
#include "lib/numerics/scaling_math.h"      // update_slot
#include "tests/kernels/cuda_test_util.h"

namespace {

using namespace fp8t::test;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// amax written into h[0] of each slot before each update; slots alternate E4M3 / E5M2 maxima.
// Covers: zero (the slot is skipped: no roll, no new scale), inf (keep scale), NaN (ignored by
// the window max, kept by most_recent), a subnormal amax (scale overflows -> FLT_MAX), 2^-120
// (overflows only in the old (fp8_max / amax) / 2^margin order), huge and ordinary values.
const std::vector<std::vector<float>> kScript = {
    {1.0f, 0.0f, 3.5f, 1e-3f, kInf},
    {0.0f, 2.0f, kNaN, 448.0f, 7.0f},
    {1e-42f, 5.0f, 0.25f, 0.0f, 1e30f},
    {kNaN, kInf, 0.0f, 3.0e38f, 1.0f},
    {2.0f, 1e-40f, 4.0f, 100.0f, 0.0f},
    {0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
    {9.0f, 3.0f, 1.0f, 2.0f, 6.0f},
    {7.52316384526264e-37f, 1.17549435e-38f, 0.0f, 7.926375814311875e37f, 1.5e-45f},
};

}  // namespace

TEST_CASE("update_scaling: bit-exact vs update_slot over a scripted amax sequence", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  const int slots = static_cast<int>(kScript[0].size());
  for (int history_len : {1, 4}) {
    for (bool use_max : {true, false}) {
      for (int margin : {0, 2, -3, 17}) {
        CAPTURE(history_len, use_max, margin);
        const float two_pow_margin = std::ldexp(1.0f, margin);
        // Host state and device state start equal: scale 1, history zeros.
        std::vector<float> h(static_cast<size_t>(history_len) * slots, 0.0f), s(slots, 1.0f), si(slots, 1.0f),
            fmax(slots);
        for (int i = 0; i < slots; ++i) fmax[i] = i % 2 ? 57344.0f : 448.0f;
        at::Tensor hist = at::zeros({history_len, slots}, on_cuda(at::kFloat));
        at::Tensor scale = at::ones({slots}, on_cuda(at::kFloat));
        at::Tensor scale_inv = at::ones({slots}, on_cuda(at::kFloat));
        const at::Tensor fmax_t = at::tensor(fmax).cuda();
        bool saw_flt_max = false;
        for (size_t step = 0; step < kScript.size(); ++step) {
          CAPTURE(step);
          const bool recompute = step % 3 != 2;  // an `interval` > 1 skips some recomputations
          for (int i = 0; i < slots; ++i) h[i] = kScript[step][i];
          hist[0].copy_(at::tensor(kScript[step]));
          for (int i = 0; i < slots; ++i) {
            fp8t::fp8::update_slot(h.data() + i, history_len, slots, &s[i], &si[i], fmax[i], two_pow_margin, use_max,
                                   recompute);
          }
          gpu.update_scaling(hist, scale, scale_inv, fmax_t, two_pow_margin, use_max, recompute);
          const at::Tensor gh = hist.cpu().contiguous(), gs = scale.cpu(), gsi = scale_inv.cpu();
          for (int i = 0; i < slots; ++i) {
            CAPTURE(i, s[i], gs[i].item<float>());
            REQUIRE(same_bits(gs[i].item<float>(), s[i]));
            REQUIRE(same_bits(gsi[i].item<float>(), si[i]));
            saw_flt_max = saw_flt_max || s[i] == FLT_MAX;
          }
          for (size_t j = 0; j < h.size(); ++j) {
            CAPTURE(j);
            REQUIRE(same_bits(gh.data_ptr<float>()[j], h[j]));
          }
        }
        // The script reaches the overflow case: a subnormal amax gives FLT_MAX (step 4, slot 1).
        if (!use_max) REQUIRE(saw_flt_max);
      }
    }
  }
}

#endif  // FP8T_WITH_CUDA
