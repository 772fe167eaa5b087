// kernels/saturation.cu (through CudaBackend::saturation_stats): exact counts against a host
// count with the reference codec, and agreement with the CPU emulation.
#if defined(FP8T_WITH_CUDA)

#include <cmath>   // std::fabs
#include <limits>  // std::numeric_limits

#include "lib/fp8/backends/cpu_backend.h"   // cpu_backend
#include "lib/fp8/backends/cuda_backend.h"  // cuda_backend
#include "tests/kernels/cuda_test_util.h"

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

}  // namespace

TEST_CASE("saturation_stats: saturated and flushed fractions are exact", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  fp8t::fp8::Backend& cpu = fp8t::fp8::cpu_backend();
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      CAPTURE(fp8t::fp8::format_name(f), dtype_name(dt));
      at::manual_seed(11);
      // Magnitudes from 2^-30 to 2^30: at scale 1 some saturate, some flush, most are in range.
      at::Tensor x = at::randn({333, 517}) * at::pow(2.0, at::randint(-30, 30, {333, 517}, at::kFloat));
      x.view({-1}).slice(0, 0, x.numel(), 13).zero_();
      x[0][1] = std::numeric_limits<float>::infinity();
      x[0][2] = std::numeric_limits<float>::quiet_NaN();
      x = x.to(dt);

      const float scale = 1.0f;
      const at::Tensor xf = x.to(at::kFloat).contiguous();
      const float* p = xf.data_ptr<float>();
      int64_t sat = 0, flush = 0;
      for (int64_t i = 0; i < xf.numel(); ++i) {
        const float v = p[i] * scale;
        sat += std::fabs(v) >= fp8t::fp8::format_max(f) ? 1 : 0;
        flush += (p[i] != 0.0f && (fp8t::fp8::encode(v, f) & 0x7f) == 0) ? 1 : 0;
      }
      REQUIRE(sat > 0);
      REQUIRE(flush > 0);

      fp8t::fp8::SlotRef gs, cs;
      gs.scale = at::full({}, scale, on_cuda(at::kFloat));
      cs.scale = at::full({}, scale, at::kFloat);
      gs.format = cs.format = f;
      const at::Tensor got = gpu.saturation_stats(x.cuda(), gs).cpu();
      REQUIRE(got.sizes() == at::IntArrayRef{2});
      const double n = static_cast<double>(xf.numel());
      REQUIRE(got[0].item<float>() == static_cast<float>(sat / n));
      REQUIRE(got[1].item<float>() == static_cast<float>(flush / n));
      const at::Tensor emu = cpu.saturation_stats(x, cs);
      REQUIRE(got[0].item<float>() == Approx(emu[0].item<float>()).epsilon(1e-6));
      REQUIRE(got[1].item<float>() == Approx(emu[1].item<float>()).epsilon(1e-6));
    }
  }
}

TEST_CASE("saturation_stats: empty tensor gives zeros", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::SlotRef s;
  s.scale = at::ones({}, on_cuda(at::kFloat));
  const at::Tensor got = fp8t::fp8::cuda_backend().saturation_stats(at::empty({0, 16}, on_cuda(at::kFloat)), s).cpu();
  REQUIRE(got[0].item<float>() == 0.0f);
  REQUIRE(got[1].item<float>() == 0.0f);
}

#endif  // FP8T_WITH_CUDA
