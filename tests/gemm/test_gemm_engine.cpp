// lib/gemm/gemm_engine.cpp and its tensor-level API (lib/gemm/gemm_tensor_api.cpp: fp8_gemm,
// bf16_gemm, bf16_gemm_into, bf16_gemm_accumulate) on the GPU: FP8 and BF16 GEMMs against float64
// products of the dequantized operands, bias epilogue, odd-but-legal shapes, plan caching, shape
// errors.
#if defined(FP8T_WITH_CUDA)

#include <cmath>   // std::ldexp
#include <string>  // std::string
#include <tuple>   // std::tuple
#include <vector>  // std::vector

#include "lib/fp8/backends/cpu_backend.h"   // decode_codes
#include "lib/fp8/backends/cuda_backend.h"  // cuda_backend
#include "lib/gemm/gemm_engine.h"           // fp8_gemm, bf16_gemm, GemmEngine
#include "lib/util/error.h"                 // fp8t::Error
#include "tests/kernels/cuda_test_util.h"

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

struct Fp8Mat {
  at::Tensor codes;      // CPU uint8 [rows, K]
  float scale_inv;       // dequantization factor
  at::Tensor dequant;    // CPU float64 [rows, K] = decode(codes) * scale_inv
};

// Random values quantized with a scale that maps their amax near the format's max, so the codes
// use the whole range (and the scale_inv matters).
Fp8Mat random_fp8(int64_t rows, int64_t k, Format f, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor x = at::randn({rows, k}) * 0.37;
  const float amax = x.abs().max().item<float>();
  const float scale = fp8t::fp8::format_max(f) / amax / 2.0f;
  Fp8Mat m;
  m.codes = host_encode(x, scale, f);
  m.scale_inv = 1.0f / scale;
  m.dequant = fp8t::fp8::decode_codes(m.codes, f).to(at::kDouble) * static_cast<double>(m.scale_inv);
  return m;
}

const char* name(Format f) { return fp8t::fp8::format_name(f); }

}  // namespace

TEST_CASE("fp8 gemm vs float64 product of the dequantized operands", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  // (a format, b format): fprop-like E4M3 x E4M3, dgrad/wgrad-like E5M2 (gradient) x E4M3, and
  // the mirrored E4M3 x E5M2.
  const std::vector<std::pair<Format, Format>> pairs = {
      {Format::kE4M3, Format::kE4M3}, {Format::kE5M2, Format::kE4M3}, {Format::kE4M3, Format::kE5M2}};
  // (M, K, N): odd-but-legal (M free, K and N multiples of 16), the smallest, a wgrad-like long K.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {17, 48, 272}, {128, 256, 192}, {1, 16, 16}, {96, 2048, 64}, {333, 128, 48}};
  double worst_bf16 = 0, worst_f32_split = 0, worst_f32_fast = 0;
  for (const auto& [fa, fb] : pairs) {
    for (const auto& [m, k, n] : shapes) {
      const Fp8Mat a = random_fp8(m, k, fa, m * 131 + k);
      const Fp8Mat b = random_fp8(n, k, fb, n * 17 + k + 1);
      const at::Tensor a_sinv = at::full({}, a.scale_inv, on_cuda(at::kFloat));
      const at::Tensor b_sinv = at::full({}, b.scale_inv, on_cuda(at::kFloat));
      // A bias exactly representable in bf16, so the bf16 epilogue adds exactly these values.
      const at::Tensor bias = at::randn({n}).to(at::kBFloat16).to(at::kFloat);
      const at::Tensor prod = at::mm(a.dequant, b.dequant.t());
      for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
        for (bool fast : {true, false}) {
          for (bool with_bias : {false, true}) {
            CAPTURE(name(fa), name(fb), m, k, n, dtype_name(out), fast, with_bias);
            const at::Tensor got = fp8t::gemm::fp8_gemm(a.codes.cuda(), fa, a_sinv, b.codes.cuda(), fb, b_sinv,
                                                        with_bias ? bias.cuda() : at::Tensor(), out, fast, "test");
            REQUIRE(got.scalar_type() == out);
            REQUIRE(got.sizes() == at::IntArrayRef{m, n});
            const at::Tensor ref = with_bias ? prod + bias.to(at::kDouble) : prod;
            const double err = rel_frobenius(got, ref);
            CAPTURE(err);
            // Tolerances. BF16 output: its rounding alone is up to 2^-9 per element -> 2^-8.
            // FP32 output: the tensor cores accumulate FP8 products with ~14 bits between
            // promotions (DeepSeek-V3 report) -> 2^-10 without fast accumulation, 2^-8 with it.
            const double tol = out == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, fast ? -8 : -10);
            REQUIRE(err <= tol);
            if (out == at::kBFloat16) worst_bf16 = std::max(worst_bf16, err);
            else if (fast) worst_f32_fast = std::max(worst_f32_fast, err);
            else worst_f32_split = std::max(worst_f32_split, err);
          }
        }
      }
    }
  }
  if (reporting()) {
    std::printf("fp8 gemm worst rel. Frobenius error: bf16 out %.2e, fp32 out split %.2e, fp32 out fast %.2e\n",
                worst_bf16, worst_f32_split, worst_f32_fast);
  }
}

TEST_CASE("CudaBackend::gemm runs the Linear GEMMs and caches one plan per problem", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const Fp8Mat x = random_fp8(64, 96, Format::kE4M3, 1);
  const Fp8Mat w = random_fp8(80, 96, Format::kE4M3, 2);
  auto operand = [](const Fp8Mat& m, Format f) {
    return fp8t::fp8::Fp8Operand{m.codes.cuda(), at::full({}, m.scale_inv, on_cuda(at::kFloat)), f};
  };
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  const at::Tensor bias = at::randn({80}).cuda();  // fp32 master bias: the engine converts it
  const at::Tensor y1 = gpu.gemm(operand(x, Format::kE4M3), operand(w, Format::kE4M3), bias, at::kBFloat16,
                                 fp8t::fp8::GemmKind::kFprop, true);
  const size_t plans = fp8t::gemm::GemmEngine::instance().cached_plans();
  const at::Tensor y2 = gpu.gemm(operand(x, Format::kE4M3), operand(w, Format::kE4M3), bias, at::kBFloat16,
                                 fp8t::fp8::GemmKind::kFprop, true);
  REQUIRE(fp8t::gemm::GemmEngine::instance().cached_plans() == plans);  // second call: cache hit
  REQUIRE(at::equal(y1, y2));
  const at::Tensor ref = at::mm(x.dequant, w.dequant.t()) + bias.cpu().to(at::kDouble);
  // The fp32 bias goes through the bf16 epilogue: its rounding (2^-9 of |bias|) adds to the
  // output rounding, still inside 2^-8 relative.
  REQUIRE(rel_frobenius(y1, ref) <= std::ldexp(1.0, -8));
}

TEST_CASE("bf16 gemm vs float64, row-major and transposed views, odd K, bias", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{33, 100, 50}, {128, 256, 192}, {1, 7, 3}};
  for (const auto& [m, k, n] : shapes) {
    at::manual_seed(m + k + n);
    const at::Tensor a = at::randn({m, k}).to(at::kBFloat16);
    const at::Tensor b = at::randn({n, k}).to(at::kBFloat16);
    const at::Tensor bias = at::randn({n}).to(at::kBFloat16);
    const at::Tensor ref = at::mm(a.to(at::kDouble), b.to(at::kDouble).t()) + bias.to(at::kDouble);
    for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
      for (int layout = 0; layout < 4; ++layout) {
        CAPTURE(m, k, n, dtype_name(out), layout);
        // Same logical operands, stored row-major or as transposed views of [K, rows] tensors.
        const at::Tensor ag = layout & 1 ? a.t().contiguous().cuda().t() : a.cuda();
        const at::Tensor bg = layout & 2 ? b.t().contiguous().cuda().t() : b.cuda();
        const at::Tensor got = fp8t::gemm::bf16_gemm(ag, bg, bias.cuda(), out, "test");
        REQUIRE(got.scalar_type() == out);
        // BF16 output: its rounding (2^-9 per element) -> 2^-8. FP32 output: exact BF16 products
        // summed in FP32 -> 1e-5.
        const double tol = out == at::kBFloat16 ? std::ldexp(1.0, -8) : 1e-5;
        REQUIRE(rel_frobenius(got, ref) <= tol);
      }
    }
  }
}

TEST_CASE("bf16 gemm into: the product written into the leading rows of a buffer, the rest untouched",
          "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const int64_t m = 40, k = 64, n = 96;
  at::manual_seed(8);
  const at::Tensor a = at::randn({m, k}).to(at::kBFloat16), b = at::randn({k, n}).to(at::kBFloat16);
  at::Tensor buf = at::full({m + 24, n}, 7.0, on_cuda(at::kBFloat16));
  at::Tensor rows = buf.narrow(0, 0, m);  // a chunk of a preallocated buffer, as the LM head's
  // b as a transposed view of a row-major [K, N] tensor (the head's dgrad reads W so).
  fp8t::gemm::bf16_gemm_into(a.cuda(), b.cuda().t(), rows, "test");
  // BF16 output of exact BF16 products summed in FP32: its rounding, 2^-9 per element -> 2^-8.
  REQUIRE(rel_frobenius(rows, at::mm(a.to(at::kDouble), b.to(at::kDouble))) <= std::ldexp(1.0, -8));
  REQUIRE(at::equal(buf.narrow(0, m, 24).cpu(), at::full({24, n}, 7.0, at::kBFloat16)));
}

TEST_CASE("bf16 gemm accumulate: out += a · bᵀ in the GEMM, over transposed views, FP32 and BF16 out",
          "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const int64_t m = 96, k = 40, n = 72;  // k: the rows of a chunk in the head's wgrad (a transposed view)
  at::manual_seed(7);
  const at::Tensor a = at::randn({m, k}).to(at::kBFloat16), b = at::randn({n, k}).to(at::kBFloat16);
  const at::Tensor start = at::randn({m, n});
  const at::Tensor ref = start.to(at::kDouble) + at::mm(a.to(at::kDouble), b.to(at::kDouble).t());
  for (at::ScalarType out_dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype_name(out_dtype));
    // a and b as the head passes them: transposed views of row-major [K, rows] tensors.
    const at::Tensor ag = a.t().contiguous().cuda().t(), bg = b.t().contiguous().cuda().t();
    at::Tensor out = start.to(out_dtype).cuda();
    const void* before = out.data_ptr();
    fp8t::gemm::bf16_gemm_accumulate(ag, bg, out, "test");
    REQUIRE(out.data_ptr() == before);  // in place
    // FP32: exact BF16 products summed in FP32 with the start value -> 1e-5. BF16 out: the start
    // value's and the result's rounding (2^-9 each) -> 2^-7.
    const double tol = out_dtype == at::kFloat ? 1e-5 : std::ldexp(1.0, -7);
    REQUIRE(rel_frobenius(out, ref) <= tol);
  }
  at::Tensor wrong = at::zeros({m, n + 1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  REQUIRE_THROWS_WITH(fp8t::gemm::bf16_gemm_accumulate(a.cuda(), b.cuda(), wrong, "test"),
                      FP8T_CONTAINS("the output must be a contiguous [96, 72] tensor"));
}

TEST_CASE("fp8 gemm errors name the GEMM, the shape and the fix", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor one = at::ones({}, on_cuda(at::kFloat));
  auto run = [&](int64_t m, int64_t k, int64_t n, Format fa, Format fb) {
    (void)fp8t::gemm::fp8_gemm(at::zeros({m, k}, on_cuda(at::kByte)), fa, one, at::zeros({n, k}, on_cuda(at::kByte)),
                               fb, one, at::Tensor(), at::kBFloat16, true, "fprop");
  };
  try {
    run(64, 100, 32, Format::kE4M3, Format::kE4M3);
    FAIL("K=100 was accepted");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("fp8 gemm fprop 64x100x32"));
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("K=100 is not a multiple of 16"));
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("fp8.skip_layers"));
  }
  REQUIRE_THROWS_WITH(run(64, 96, 40, Format::kE4M3, Format::kE4M3), FP8T_CONTAINS("N=40"));
  REQUIRE_THROWS_WITH(run(64, 96, 32, Format::kE5M2, Format::kE5M2), FP8T_CONTAINS("E5M2 x E5M2 is not supported"));
  REQUIRE_THROWS_WITH(
      (void)fp8t::gemm::fp8_gemm(at::zeros({64, 96}, on_cuda(at::kByte)), Format::kE4M3, one,
                                 at::zeros({32, 80}, on_cuda(at::kByte)), Format::kE4M3, one, at::Tensor(),
                                 at::kBFloat16, true, "dgrad"),
      FP8T_CONTAINS("same K"));
}

#endif  // FP8T_WITH_CUDA
