// kernels/cast.cu: FP8 codes bit-exact against lib/numerics/format.h, amax exact, scale_inv snapshot.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

#include "fp8t_kernels.h"                   // fp8t_cast
#include "lib/fp8/backends/cpu_backend.h"   // cpu_backend (the emulation the GPU must agree with)
#include "lib/fp8/backends/cuda_backend.h"  // cuda_backend
#include "tests/kernels/cuda_test_util.h"

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

int format_code(Format f) { return f == Format::kE4M3 ? FP8T_FORMAT_E4M3 : FP8T_FORMAT_E5M2; }
int dtype_code(at::ScalarType t) { return t == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16; }

// Normal values over several binades, plus exact zeros, values that saturate and values that
// underflow at the given scale.
at::Tensor test_input(at::IntArrayRef shape, at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn(shape, at::kFloat) * at::pow(2.0, at::randint(-12, 12, shape, at::kFloat));
  at::Tensor flat = x.view({-1});
  for (int64_t i = 0; i < flat.numel(); i += 7) flat[i] = 0.0f;
  if (flat.numel() > 3) {
    flat[1] = 1e6f;     // saturates
    flat[2] = -3e-9f;   // underflows to -0
    flat[3] = -0.0f;
  }
  return x.to(dtype);
}

struct CastRun {
  at::Tensor codes;
  float amax;
  float scale_inv;
};

CastRun run_cast(const at::Tensor& x_gpu, float scale, Format f, float amax_init) {
  const at::Tensor scale_t = at::full({}, scale, on_cuda(at::kFloat));
  at::Tensor amax_t = at::full({}, amax_init, on_cuda(at::kFloat));
  at::Tensor sinv_t = at::full({}, -1.0f, on_cuda(at::kFloat));
  at::Tensor codes = at::full(x_gpu.sizes(), 0xAB, on_cuda(at::kByte));  // poison: every byte must be written
  const cudaError_t err = fp8t_cast(x_gpu.data_ptr(), dtype_code(x_gpu.scalar_type()), x_gpu.numel(),
                                    scale_t.data_ptr<float>(), format_code(f), codes.data_ptr<uint8_t>(),
                                    amax_t.data_ptr<float>(), sinv_t.data_ptr<float>(),
                                    at::cuda::getCurrentCUDAStream().stream());
  REQUIRE(err == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return {codes, amax_t.item<float>(), sinv_t.item<float>()};
}

}  // namespace

TEST_CASE("cast: codes bit-exact vs the reference codec, amax exact, scale_inv snapshot", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const std::vector<std::vector<int64_t>> shapes = {{1, 16}, {5, 4, 3, 160}, {217, 256}, {2051, 4099}, {3, 5}};
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const auto& shape : shapes) {
        if (skip_large(c10::multiply_integers(shape))) continue;
        const float scale = f == Format::kE4M3 ? 24.0f : 1536.5f;
        const at::Tensor x = test_input(shape, dt, shape.back() * 31 + static_cast<int>(f));
        CAPTURE(fp8t::fp8::format_name(f), dtype_name(dt), x.sizes());
        const CastRun r = run_cast(x.cuda(), scale, f, 0.25f);
        require_same_codes(r.codes, host_encode(x, scale, f), x, scale);
        REQUIRE(same_bits(r.amax, host_amax(x, 0.25f)));
        REQUIRE(same_bits(r.scale_inv, 1.0f / scale));
      }
    }
  }
}

TEST_CASE("cast: unaligned input takes the scalar path with the same codes", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const at::Tensor base = test_input({1, 4097}, dt, 7).cuda();
    const at::Tensor x = base.view({-1}).slice(0, 1);  // data pointer 4 or 2 bytes past alignment
    const CastRun r = run_cast(x, 3.0f, Format::kE4M3, 0.0f);
    require_same_codes(r.codes, host_encode(x, 3.0f, Format::kE4M3), x, 3.0f);
    REQUIRE(same_bits(r.amax, host_amax(x, 0.0f)));
  }
}

TEST_CASE("cast: sweep over float bit patterns incl. NaN, inf, subnormals matches the codec", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  // 2^20 patterns spread over all 2^32 (odd stride: every exponent, both signs, NaN payloads).
  const int64_t kN = sanitizer_run() ? int64_t{1} << 16 : int64_t{1} << 20;
  at::Tensor bits = at::arange(kN, at::kLong).mul_(sanitizer_run() ? 65521 : 4093).add_(12345).remainder_(int64_t{1} << 32);
  bits = at::where(bits >= (int64_t{1} << 31), bits - (int64_t{1} << 32), bits);  // as int32 values
  at::Tensor x = bits.to(at::kInt).view(at::kFloat).contiguous();
  // Exact ties and the edges of both formats at scale 1.
  const std::vector<float> edges = {448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 1.0f + 1.0f / 16, 1.0f + 3.0f / 16,
                                    0.001953125f, 0.0009765625f, 0.0029296875f, 1.52587890625e-05f,
                                    7.62939453125e-06f, 2.288818359375e-05f, std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                                    -0.0f};
  for (size_t i = 0; i < edges.size(); ++i) x[static_cast<int64_t>(i)] = edges[i];
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    CAPTURE(fp8t::fp8::format_name(f));
    const CastRun r = run_cast(x.cuda(), 1.0f, f, 0.0f);
    require_same_codes(r.codes, host_encode(x, 1.0f, f), x, 1.0f);
    // The sweep contains NaNs and infs: NaN elements are ignored (TE's fmaxf amax), inf counts.
    REQUIRE(r.amax == std::numeric_limits<float>::infinity());
  }
}

TEST_CASE("cast: amax accumulates across calls and ignores NaN elements", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor scale = at::ones({}, on_cuda(at::kFloat));
  at::Tensor amax = at::zeros({}, on_cuda(at::kFloat));
  at::Tensor sinv = at::empty({}, on_cuda(at::kFloat));
  at::Tensor codes = at::empty({64}, on_cuda(at::kByte));
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  auto cast = [&](const at::Tensor& x) {
    REQUIRE(fp8t_cast(x.data_ptr(), FP8T_DTYPE_F32, x.numel(), scale.data_ptr<float>(), FP8T_FORMAT_E4M3,
                      codes.data_ptr<uint8_t>(), amax.data_ptr<float>(), sinv.data_ptr<float>(), s) == cudaSuccess);
  };
  cast(at::full({64}, -3.0f, on_cuda(at::kFloat)));
  cast(at::full({64}, 2.0f, on_cuda(at::kFloat)));
  REQUIRE(amax.item<float>() == 3.0f);
  at::Tensor with_nan = at::full({64}, 1.0f, on_cuda(at::kFloat));
  with_nan[17] = std::numeric_limits<float>::quiet_NaN();
  cast(with_nan);
  REQUIRE(amax.item<float>() == 3.0f);  // the NaN element does not reach the amax
  cast(at::full({64}, 1e30f, on_cuda(at::kFloat)));
  REQUIRE(amax.item<float>() == 1e30f);
}

TEST_CASE("cast: precondition violations return cudaErrorInvalidValue", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor x = at::ones({16}, on_cuda(at::kFloat));
  at::Tensor codes = at::empty({16}, on_cuda(at::kByte));
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  REQUIRE(fp8t_cast(x.data_ptr(), FP8T_DTYPE_F32, 16, nullptr, FP8T_FORMAT_E4M3, codes.data_ptr<uint8_t>(), nullptr,
                    nullptr, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cast(x.data_ptr(), 7, 16, x.data_ptr<float>(), FP8T_FORMAT_E4M3, codes.data_ptr<uint8_t>(), nullptr,
                    nullptr, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cast(x.data_ptr(), FP8T_DTYPE_F32, 16, x.data_ptr<float>(), 5, codes.data_ptr<uint8_t>(), nullptr,
                    nullptr, s) == cudaErrorInvalidValue);
}

TEST_CASE("CudaBackend::quantize agrees with the CPU emulation bit for bit", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  fp8t::fp8::Backend& cpu = fp8t::fp8::cpu_backend();
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      const at::Tensor x = test_input({217, 256}, dt, 99);
      CAPTURE(fp8t::fp8::format_name(f), dtype_name(dt));
      auto slot_on = [&](at::Device d) {
        fp8t::fp8::SlotRef s;
        s.scale = at::full({}, 40.0f, at::TensorOptions().dtype(at::kFloat).device(d));
        s.amax = at::full({}, 0.5f, at::TensorOptions().dtype(at::kFloat).device(d));
        s.format = f;
        s.index = 3;
        return s;
      };
      const auto gs = slot_on(at::kCUDA), cs = slot_on(at::kCPU);
      const auto g = gpu.quantize(x.cuda(), gs, true, true);
      const auto c = cpu.quantize(x, cs, true, true);
      require_same_codes(g.rowwise.codes, c.rowwise.codes, x, 40.0f);
      require_same_codes(g.columnwise.codes, c.columnwise.codes, x.t().contiguous(), 40.0f);
      REQUIRE(same_bits(gs.amax.item<float>(), cs.amax.item<float>()));
      REQUIRE(same_bits(g.rowwise.scale_inv.item<float>(), c.rowwise.scale_inv.item<float>()));
      REQUIRE(g.rowwise.format == f);
      // Rowwise only: elementwise kernel; columnwise only: no rowwise copy.
      const auto row_only = gpu.quantize(x.cuda(), gs, true, false);
      REQUIRE(!row_only.columnwise.defined());
      require_same_codes(row_only.rowwise.codes, c.rowwise.codes, x, 40.0f);
      const auto col_only = gpu.quantize(x.cuda(), gs, false, true);
      REQUIRE(!col_only.rowwise.defined());
      require_same_codes(col_only.columnwise.codes, c.columnwise.codes, x.t().contiguous(), 40.0f);
    }
  }
}

#endif  // FP8T_WITH_CUDA
