// kernels/cast_transpose.cu's two kernels against each other: without dbias the 128x64 tiled
// kernel (kernels/transpose_tile.cuh: register byte transpose, hardware bf16 rounding, max.NaN
// amax) runs, with dbias the 64x64 kernel (kernels/cast_tile.cuh). Both evaluate the same
// activation functions (kernels/activation.cuh), so their codes and amax must agree bit for bit,
// for every activation, dtype, format and path (vector tiles, partial edge tiles, element path),
// also with NaN, inf and subnormal inputs. Plus the bandwidth of the 1.3B model's casts.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <algorithm>  // std::sort
#include <cmath>      // std::ldexp
#include <cstdio>     // std::printf
#include <functional>  // std::function
#include <limits>     // std::numeric_limits
#include <vector>     // std::vector

#include "fp8t_kernels.h"                  // fp8t_cast_transpose_act, fp8t_transpose_codes, ...
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, host_encode, host_amax, first_mismatch, same_bits
#include "tests/kernels/cuda_timing.h"     // median_event_ms

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

int dtype_code(at::ScalarType t) { return t == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16; }
int format_code(Format f) { return f == Format::kE4M3 ? FP8T_FORMAT_E4M3 : FP8T_FORMAT_E5M2; }

struct CastOut {
  at::Tensor row, col, amax, scale_inv;
};

// One fp8t_cast_transpose_act launch; with_dbias selects the 64x64 kernel (dbias is discarded).
CastOut run_cast(int act, const at::Tensor& x, const at::Tensor& h, float scale, Format f, bool with_dbias) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  CastOut o;
  o.row = at::full({rows, cols}, 0xAB, on_cuda(at::kByte));
  o.col = at::full({cols, rows}, 0xCD, on_cuda(at::kByte));
  o.amax = at::full({}, 0.0f, on_cuda(at::kFloat));
  o.scale_inv = at::full({}, -1.0f, on_cuda(at::kFloat));
  const at::Tensor scale_t = at::full({}, scale, on_cuda(at::kFloat));
  at::Tensor dbias = at::empty({cols}, on_cuda(at::kFloat));
  at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_cast_transpose_dbias_workspace_bytes(rows, cols))},
                            on_cuda(at::kByte));
  REQUIRE(fp8t_cast_transpose_act(act, x.data_ptr(), h.defined() ? h.data_ptr() : nullptr,
                                  dtype_code(x.scalar_type()), rows, cols, scale_t.data_ptr<float>(), format_code(f),
                                  o.row.data_ptr<uint8_t>(), o.col.data_ptr<uint8_t>(), o.amax.data_ptr<float>(),
                                  o.scale_inv.data_ptr<float>(), with_dbias ? dbias.data_ptr<float>() : nullptr,
                                  with_dbias ? ws.data_ptr() : nullptr, s) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return o;
}

void require_same_cast(const CastOut& tiled, const CastOut& ref, float scale) {
  // Compared on the device; the first differing byte is looked up only when there is one.
  const int64_t row_mismatch = at::equal(tiled.row, ref.row) ? -1 : first_mismatch(tiled.row, ref.row);
  const int64_t col_mismatch = at::equal(tiled.col, ref.col) ? -1 : first_mismatch(tiled.col, ref.col);
  INFO("first mismatch: rowwise codes " << row_mismatch << ", columnwise " << col_mismatch);
  REQUIRE(row_mismatch == -1);
  REQUIRE(col_mismatch == -1);
  INFO("amax tiled " << tiled.amax.item<float>() << ", 64x64 " << ref.amax.item<float>());
  REQUIRE(same_bits(tiled.amax.item<float>(), ref.amax.item<float>()));
  REQUIRE(same_bits(tiled.scale_inv.item<float>(), 1.0f / scale));
}

// Gradient-like values over 16 binades with zeros, and (edges) NaN, +-inf, -0 and huge values
// scattered over the tensor (one in 97 elements each); float32, generated on the device.
at::Tensor test_input(int64_t rows, int64_t cols, uint64_t seed, bool edges) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, cols}, on_cuda(at::kFloat)) *
                 at::pow(2.0, at::randint(-8, 8, {rows, cols}, on_cuda(at::kFloat)));
  x.view({-1}).slice(0, 0, x.numel(), 11).zero_();
  if (edges) {
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), -0.0f, 3.0e38f, -1.0e30f};
    for (int i = 0; i < 6; ++i) x.view({-1}).slice(0, 5 + 13 * i, x.numel(), 97).fill_(specials[i]);
  }
  return x;
}

// Element path, vector tiles with partial edge tiles, and full tiles. {4096, 8192} has 4096 tiles,
// more than the launch's four waves of 2-4 blocks per SM on an H200 (1056-2112 blocks), so each
// block walks two to four tiles (the prefetch, the walk and both shared buffers in use).
const std::vector<std::pair<int64_t, int64_t>> kTiledShapes = {{13, 7}, {130, 200}, {144, 200}, {16, 8},
                                                               {256, 128}, {4096, 8192}};

}  // namespace

TEST_CASE("cast_transpose tiled kernel: the 64x64 kernel's codes and amax for x, gelu and the GELU backward",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (int act : {FP8T_ACT_NONE, FP8T_ACT_GELU, FP8T_ACT_DGELU}) {
    for (const auto& [rows, cols] : kTiledShapes) {
      for (bool edges : {false, true}) {
        if (skip_large(rows * cols)) continue;
        const at::Tensor x = test_input(rows, cols, rows * 7 + cols + act, edges);
        const at::Tensor h = act == FP8T_ACT_DGELU ? at::randn({rows, cols}, on_cuda(at::kFloat)) * 3.0 : at::Tensor();
        for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
          const at::Tensor xg = x.to(dt);
          const at::Tensor hg = h.defined() ? h.to(dt) : at::Tensor();
          for (Format f : {Format::kE4M3, Format::kE5M2}) {
            CAPTURE(act, dtype_name(dt), fp8t::fp8::format_name(f), rows, cols, edges);
            const float scale = f == Format::kE4M3 ? 2.0f : 64.0f;
            require_same_cast(run_cast(act, xg, hg, scale, f, false), run_cast(act, xg, hg, scale, f, true), scale);
          }
        }
      }
    }
  }
}

TEST_CASE("cast_transpose tiled kernel: one layout or none (amax only) writes what both layouts do",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (int act : {FP8T_ACT_NONE, FP8T_ACT_GELU, FP8T_ACT_DGELU}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{144, 200}, {130, 200}, {1024, 512}}) {
      CAPTURE(act, rows, cols);
      const at::Tensor x = test_input(rows, cols, rows + cols + act, true).to(at::kBFloat16);
      const at::Tensor h =
          act == FP8T_ACT_DGELU ? (at::randn({rows, cols}, on_cuda(at::kFloat)) * 3.0).to(at::kBFloat16) : at::Tensor();
      const CastOut both = run_cast(act, x, h, 2.0f, Format::kE4M3, false);
      const at::Tensor scale_t = at::full({}, 2.0f, on_cuda(at::kFloat));
      for (int layouts : {1, 2, 0}) {  // rowwise only, columnwise only, neither
        CAPTURE(layouts);
        at::Tensor row = at::full({rows, cols}, 0xAB, on_cuda(at::kByte));
        at::Tensor col = at::full({cols, rows}, 0xCD, on_cuda(at::kByte));
        at::Tensor amax = at::zeros({}, on_cuda(at::kFloat));
        REQUIRE(fp8t_cast_transpose_act(act, x.data_ptr(), h.defined() ? h.data_ptr() : nullptr, FP8T_DTYPE_BF16,
                                        rows, cols, scale_t.data_ptr<float>(), FP8T_FORMAT_E4M3,
                                        layouts == 1 ? row.data_ptr<uint8_t>() : nullptr,
                                        layouts == 2 ? col.data_ptr<uint8_t>() : nullptr, amax.data_ptr<float>(),
                                        nullptr, nullptr, nullptr, s) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(at::equal(row, layouts == 1 ? both.row : at::full_like(row, 0xAB)));
        REQUIRE(at::equal(col, layouts == 2 ? both.col : at::full_like(col, 0xCD)));
        REQUIRE(same_bits(amax.item<float>(), both.amax.item<float>()));
      }
    }
  }
}

TEST_CASE("cast_transpose tiled kernel: plain casts with NaN and inf bit-exact against the host codec",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (Format f : {Format::kE4M3, Format::kE5M2}) {
      for (const auto& [rows, cols] : kTiledShapes) {
        if (skip_large(rows * cols)) continue;
        CAPTURE(dtype_name(dt), fp8t::fp8::format_name(f), rows, cols);
        if (rows * cols > (int64_t{1} << 22)) continue;  // the host codec is slow; the 64x64 comparison covers it
        const at::Tensor x = test_input(rows, cols, rows + 3 * cols, true).to(dt).cpu();
        const float scale = 4.0f;
        const CastOut o = run_cast(FP8T_ACT_NONE, x.cuda(), at::Tensor(), scale, f, false);
        require_same_codes(o.row, host_encode(x, scale, f), x, scale);
        const at::Tensor xt = x.t().contiguous();
        require_same_codes(o.col, host_encode(xt, scale, f), xt, scale);
        REQUIRE(same_bits(o.amax.item<float>(), host_amax(x, 0.0f)));
      }
    }
  }
}

TEST_CASE("cast_transpose tiled kernel: sweep over float bit patterns incl. NaN payloads matches the codec",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  // 2^20 fp32 patterns spread over all 2^32 (odd stride: every exponent, both signs, NaN payloads)
  // as [1024, 1024]: every vector tile meets NaNs, so the NaN repair path runs for both layouts.
  const int64_t kSide = sanitizer_run() ? 256 : 1024;
  at::Tensor bits = at::arange(kSide * kSide, at::kLong).mul_(4093).add_(12345).remainder_(int64_t{1} << 32);
  bits = at::where(bits >= (int64_t{1} << 31), bits - (int64_t{1} << 32), bits);  // as int32 values
  const at::Tensor x = bits.to(at::kInt).view(at::kFloat).contiguous().view({kSide, kSide});
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    CAPTURE(fp8t::fp8::format_name(f));
    const CastOut o = run_cast(FP8T_ACT_NONE, x.cuda(), at::Tensor(), 1.0f, f, false);
    require_same_codes(o.row, host_encode(x, 1.0f, f), x, 1.0f);
    const at::Tensor xt = x.t().contiguous();
    require_same_codes(o.col, host_encode(xt, 1.0f, f), xt, 1.0f);
    REQUIRE(same_bits(o.amax.item<float>(), host_amax(x, 0.0f)));
  }
}

TEST_CASE("cast_transpose tiled kernel: GELU of bf16 subnormals rounds as the 64x64 kernel and the host",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  // |x| < 2^-126: tanh(sqrt(2/pi) (x + 0.044715 x^3)) adds nothing to 1, so gelu(x) = 0.5 * x,
  // a subnormal rounded to bf16. The tiled kernel rounds with cvt.rn.bf16x2.f32, the 64x64 kernel
  // and the host with the integer round-to-nearest-even of c10::BFloat16. Scale 2^125 brings the
  // values into E4M3's range.
  const int64_t rows = 256, cols = 128;
  at::manual_seed(5);
  const at::Tensor x = (at::randn({rows, cols}) * std::ldexp(1.0, -130)).to(at::kBFloat16);
  const float scale = std::ldexp(1.0f, 125);
  const CastOut tiled = run_cast(FP8T_ACT_GELU, x.cuda(), at::Tensor(), scale, Format::kE4M3, false);
  require_same_cast(tiled, run_cast(FP8T_ACT_GELU, x.cuda(), at::Tensor(), scale, Format::kE4M3, true), scale);
  const at::Tensor y = (x.to(at::kFloat) * 0.5f).to(at::kBFloat16);
  REQUIRE(y.to(at::kFloat).abs().max().item<float>() > 0.0f);
  require_same_codes(tiled.row, host_encode(y, scale, Format::kE4M3), y, scale);
  REQUIRE(same_bits(tiled.amax.item<float>(), host_amax(y, 0.0f)));
}

TEST_CASE("transpose_codes: several tiles per block ([4096, 8192]) and a partial edge", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{4096, 8192}, {4112, 8200}}) {
    if (skip_large(rows * cols)) continue;
    CAPTURE(rows, cols);
    const at::Tensor in = at::randint(0, 256, {rows, cols}, on_cuda(at::kByte));
    at::Tensor out = at::full({cols, rows}, 0xEE, on_cuda(at::kByte));
    REQUIRE(fp8t_transpose_codes(in.data_ptr<uint8_t>(), rows, cols, out.data_ptr<uint8_t>(), s) == cudaSuccess);
    REQUIRE(at::equal(out, in.t().contiguous()));
  }
}

namespace {

// Median milliseconds of `run` over 30 launches (one CUDA event pair each) after 3 warm-ups.
double median_ms(const std::function<cudaError_t()>& run) {
  return fp8t::test::median_event_ms(3, 30, [&] { REQUIRE(run() == cudaSuccess); });
}

}  // namespace

TEST_CASE("cast_transpose timing: GPT-1.3B casts in TB/s (runs with FP8T_TEST_REPORT)", "[kernels][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  const int64_t rows = 16384;
  if (!reporting()) SKIP("a timing case: it runs with FP8T_TEST_REPORT=1");
  if (skip_large(rows * 8192)) SKIP("too large under compute-sanitizer (FP8T_TEST_SMALL)");
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  at::manual_seed(1);
  const at::Tensor h = (at::randn({rows, 8192}, on_cuda(at::kFloat)) * 3.0).to(at::kBFloat16);
  const at::Tensor dy = (at::randn({rows, 8192}, on_cuda(at::kFloat)) * 1e-3).to(at::kBFloat16);
  const at::Tensor g = (at::randn({rows, 2048}, on_cuda(at::kFloat)) * 1e-3).to(at::kBFloat16);
  const at::Tensor one = at::ones({}, on_cuda(at::kFloat));
  at::Tensor amax = at::zeros({}, on_cuda(at::kFloat)), sinv = at::zeros({}, on_cuda(at::kFloat));
  at::Tensor row = at::empty({rows, 8192}, on_cuda(at::kByte)), col = at::empty({8192, rows}, on_cuda(at::kByte));
  at::Tensor dbias = at::empty({8192}, on_cuda(at::kFloat));
  at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_cast_transpose_dbias_workspace_bytes(rows, 8192))},
                            on_cuda(at::kByte));
  at::Tensor copy = at::empty_like(h);
  auto cast = [&](int act, const at::Tensor& x, const at::Tensor& hh, int fmt, bool with_dbias) {
    return [&, act, fmt, with_dbias, xp = x.data_ptr(), hp = hh.defined() ? hh.data_ptr() : nullptr,
            cols = x.size(1)]() {
      return fp8t_cast_transpose_act(act, xp, hp, FP8T_DTYPE_BF16, rows, cols, one.data_ptr<float>(), fmt,
                                     row.data_ptr<uint8_t>(), col.data_ptr<uint8_t>(), amax.data_ptr<float>(),
                                     sinv.data_ptr<float>(), with_dbias ? dbias.data_ptr<float>() : nullptr,
                                     with_dbias ? ws.data_ptr() : nullptr, s);
    };
  };
  const double n8 = static_cast<double>(rows) * 8192, n2 = static_cast<double>(rows) * 2048;
  const at::Tensor none;
  // Bytes: every bf16 input read once, both FP8 copies written once.
  const struct {
    const char* name;
    std::function<cudaError_t()> run;
    double bytes;
    bool tiled;
  } cases[] = {
      {"gelu cast+transpose bf16 [16384, 8192] E4M3", cast(FP8T_ACT_GELU, h, none, FP8T_FORMAT_E4M3, false), 4 * n8,
       true},
      {"dgelu cast+transpose bf16 [16384, 8192] E5M2", cast(FP8T_ACT_DGELU, dy, h, FP8T_FORMAT_E5M2, false), 6 * n8,
       true},
      {"grad cast+transpose bf16 [16384, 2048] E5M2", cast(FP8T_ACT_NONE, g, none, FP8T_FORMAT_E5M2, false), 4 * n2,
       true},
      {"grad cast+transpose bf16 [16384, 8192] E5M2", cast(FP8T_ACT_NONE, dy, none, FP8T_FORMAT_E5M2, false), 4 * n8,
       true},
      {"transpose_codes [16384, 2048]", [&] {
         return fp8t_transpose_codes(row.data_ptr<uint8_t>(), rows, 2048, col.data_ptr<uint8_t>(), s);
       }, 2 * n2, true},
      {"(64x64 kernel) dgelu+dbias bf16 [16384, 8192]", cast(FP8T_ACT_DGELU, dy, h, FP8T_FORMAT_E5M2, true), 6 * n8,
       false},
      {"(reference) device-to-device copy of 256 MiB", [&] {
         return cudaMemcpyAsync(copy.data_ptr(), h.data_ptr(), h.nbytes(), cudaMemcpyDeviceToDevice, s);
       }, 2.0 * h.nbytes(), false},
  };
  for (const auto& c : cases) {
    const double ms = median_ms(c.run);
    const double tbs = c.bytes / (ms * 1e-3) / 1e12;
    std::printf("%-50s %8.4f ms  %5.2f TB/s (median of 30)\n", c.name, ms, tbs);
    // Robust floor only (the figures are what matters): a broken launch or a serialised kernel
    // lands far below; the target on an H200 is >= 2.8 TB/s.
    if (c.tiled) CHECK(tbs > 1.0);
  }
}

#endif  // FP8T_WITH_CUDA
