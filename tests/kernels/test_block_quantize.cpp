// kernels/block_quantize.cu: 1x128 and 128x128 casts bit-exact against the CPU emulation
// (lib/fp8/backends/block_cpu.cpp): codes of both layouts, every scale_inv and the padding of the scale
// buffers, with sentinel-filled outputs, odd shapes, both input dtypes, pow2 on and off.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <algorithm>  // std::max
#include <cmath>      // std::ldexp
#include <cstdio>     // std::printf
#include <limits>     // std::numeric_limits
#include <string>     // std::string
#include <vector>     // std::vector

#include "fp8t_block_kernels.h"               // fp8t_block_quantize_1x128 / _128x128
#include "lib/numerics/block_math.h"          // layouts
#include "lib/fp8/backends/block_quantize.h"  // block_quantize_cpu, block_quantize
#include "tests/kernels/cuda_test_util.h"

namespace {

using namespace fp8t::test;
namespace fm = fp8t::fp8;

// The padded buffer behind a scale grid of an operand [rows, k].
std::pair<int64_t, int64_t> buffer_dims(int64_t rows, int64_t k, int block_rows) {
  if (block_rows == 1) return {fm::ceil_div(k, 128), fm::vec128_scale_stride(rows)};
  return {fm::blk128_scale_rows(rows), fm::blk128_scale_stride(k)};
}

at::Tensor buffer_of(const at::Tensor& grid, int64_t rows, int64_t k, int block_rows) {
  const auto [r, s] = buffer_dims(rows, k, block_rows);
  return grid.as_strided({r, s}, {s, 1}, 0);
}

at::Tensor activation_like(int64_t rows, int64_t cols, at::ScalarType dt, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, cols}) * at::pow(2.0, at::randint(-10, 10, {rows, cols}, at::kFloat));
  x.view(-1).slice(0, 0, x.numel(), 17).zero_();
  return x.to(dt);
}

// Scale buffers compared as bits (NaN sentinels that survive would show up).
void require_same_floats(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(at::equal(got.cpu().contiguous().view(at::kInt), want.cpu().contiguous().view(at::kInt)));
}

struct GpuCast {
  at::Tensor row, row_s, col, col_s;  // codes and scale BUFFERS
};

// One launch of the C API with sentinel-filled outputs.
GpuCast run_kernel(const at::Tensor& x, int block_rows, bool pow2) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const auto [rr, rs] = buffer_dims(rows, cols, block_rows);
  const auto [cr, cs] = buffer_dims(cols, rows, block_rows);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  GpuCast g{at::full({rows, cols}, 0xAB, on_cuda(at::kByte)), at::full({rr, rs}, nan, on_cuda(at::kFloat)),
            at::full({cols, rows}, 0xCD, on_cuda(at::kByte)), at::full({cr, cs}, nan, on_cuda(at::kFloat))};
  const at::Tensor xg = x.cuda();
  const auto launch = block_rows == 1 ? fp8t_block_quantize_1x128 : fp8t_block_quantize_128x128;
  REQUIRE(launch(xg.data_ptr(), x.scalar_type() == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16, rows, cols,
                 pow2 ? 1 : 0, g.row.data_ptr<uint8_t>(), g.row_s.data_ptr<float>(), g.col.data_ptr<uint8_t>(),
                 g.col_s.data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return g;
}

// [rows, cols]: tiny, fewer rows than the 4-row scale padding, partial 128-blocks both ways, not a
// multiple of 8 (scalar paths), exact tiles, a large one.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},     {3, 200},   {5, 128},   {128, 128},
                                                          {130, 257}, {257, 129}, {13, 7},    {64, 300},
                                                          {256, 384}, {1000, 72}, {2056, 4160}};

}  // namespace

TEST_CASE("block_quantize: codes and scales bit-exact vs the CPU emulation", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (const auto& [rows, cols] : kShapes) {
    if (skip_large(rows * cols)) continue;
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      const at::Tensor x = activation_like(rows, cols, dt, rows * 7 + cols);
      for (bool pow2 : {true, false}) {
        for (int block_rows : {1, 128}) {
          CAPTURE(rows, cols, dtype_name(dt), pow2, block_rows);
          const GpuCast g = run_kernel(x, block_rows, pow2);
          const fm::BlockQuantized c = fm::block_quantize_cpu(x, block_rows, true, true, pow2);
          require_same_codes(g.row, c.rowwise.codes, x, 1.0f);
          require_same_codes(g.col, c.columnwise.codes, x.t().contiguous(), 1.0f);
          require_same_floats(g.row_s, buffer_of(c.rowwise.scale_inv, rows, cols, block_rows));
          require_same_floats(g.col_s, buffer_of(c.columnwise.scale_inv, cols, rows, block_rows));
        }
      }
    }
  }
}

TEST_CASE("block_quantize: edge values and one layout at a time", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  at::Tensor x = at::zeros({136, 264});
  const std::vector<float> edge = {inf, -inf, nan, 448.0f, -448.0f, std::ldexp(1.0f, -130), std::ldexp(1.0f, -149),
                                   -0.0f, 3.4e38f, 1e-20f};
  for (size_t i = 0; i < edge.size(); ++i) x.view(-1)[static_cast<int64_t>(i * 977) % x.numel()] = edge[i];
  x[1].fill_(std::ldexp(1.0f, -135));  // a row of subnormals: scale from value_for_inf
  x[2].fill_(nan);                     // an all-NaN row
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const at::Tensor xd = x.to(dt);
    for (int block_rows : {1, 128}) {
      CAPTURE(dtype_name(dt), block_rows);
      const fm::BlockQuantized c = fm::block_quantize_cpu(xd, block_rows, true, true, true);
      // Through the LibTorch wrapper, asking for one layout at a time.
      const fm::BlockQuantized r = fm::block_quantize(xd.cuda(), block_rows, true, false, true);
      const fm::BlockQuantized t = fm::block_quantize(xd.cuda(), block_rows, false, true, true);
      REQUIRE_FALSE(r.columnwise.defined());
      REQUIRE_FALSE(t.rowwise.defined());
      require_same_codes(r.rowwise.codes, c.rowwise.codes, xd, 1.0f);
      require_same_codes(t.columnwise.codes, c.columnwise.codes, xd.t().contiguous(), 1.0f);
      REQUIRE(at::equal(r.rowwise.scale_inv.cpu(), c.rowwise.scale_inv));
      REQUIRE(at::equal(t.columnwise.scale_inv.cpu(), c.columnwise.scale_inv));
    }
  }
}

TEST_CASE("block_quantize: refused launches name the failed check", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor x = at::zeros({4, 4}, on_cuda(at::kFloat));
  const at::Tensor codes = at::zeros({4, 4}, on_cuda(at::kByte));
  REQUIRE(fp8t_block_quantize_1x128(x.data_ptr(), FP8T_DTYPE_F32, 4, 4, 1, codes.data_ptr<uint8_t>(), nullptr,
                                    nullptr, nullptr, nullptr) == cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("rowwise codes and scale_inv come together"));
  REQUIRE(fp8t_block_quantize_128x128(x.data_ptr(), 7, 4, 4, 1, nullptr, nullptr, nullptr, nullptr, nullptr) ==
          cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("fp8t_block_quantize_128x128"));
}

TEST_CASE("bandwidth of the block casts, both layouts (hidden; GPU)", "[.bench-block]") {
  FP8T_REQUIRE_GPU();
  if (sanitizer_run()) SKIP("not under compute-sanitizer (FP8T_TEST_SMALL): a bandwidth measurement");
  const int64_t rows = 16384, cols = 8192;
  const at::Tensor x = at::randn({rows, cols}, on_cuda(at::kBFloat16));
  for (int block_rows : {1, 128}) {
    (void)fm::block_quantize(x, block_rows, true, true, true);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    constexpr int kIters = 20;
    cudaEventRecord(start, at::cuda::getCurrentCUDAStream().stream());
    for (int i = 0; i < kIters; ++i) (void)fm::block_quantize(x, block_rows, true, true, true);
    cudaEventRecord(stop, at::cuda::getCurrentCUDAStream().stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    // bf16 read once (2 bytes) + two code copies (2 bytes) per element; scales are < 1%.
    const double gbps = 4.0 * rows * cols * kIters / (ms * 1e-3) / 1e9;
    std::printf("block cast %s %lldx%lld bf16 -> both layouts: %.3f ms, %.0f GB/s\n",
                block_rows == 1 ? "1x128" : "128x128", static_cast<long long>(rows), static_cast<long long>(cols),
                ms / kIters, gbps);
    REQUIRE(ms > 0);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

// ---- the fused casts: GELU, the GELU backward, dbias (fp8t_block_quantize_act) ---------------

namespace {

const char* act_label(int act) { return act == FP8T_ACT_GELU ? "gelu" : (act == FP8T_ACT_DGELU ? "dgelu" : "none"); }

// What the fused cast quantizes, from the kernels' own GELU functions (fp8t_activation_values):
// the reference is the CPU block cast of exactly these values.
at::Tensor fused_values(int act, const at::Tensor& xg, const at::Tensor& hg) {
  if (act == FP8T_ACT_NONE) return xg;
  at::Tensor out = at::empty_like(xg);
  REQUIRE(fp8t_activation_values(act, xg.data_ptr(), hg.defined() ? hg.data_ptr() : nullptr,
                                 xg.scalar_type() == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16, xg.numel(),
                                 out.data_ptr(), at::cuda::getCurrentCUDAStream().stream()) == cudaSuccess);
  return out;
}

struct FusedCast {
  GpuCast g;
  at::Tensor dbias;
};

// One fp8t_block_quantize_act launch with sentinel-filled outputs (dbias too, when asked for).
FusedCast run_fused(int act, const at::Tensor& xg, const at::Tensor& hg, bool pow2, bool want_dbias) {
  const int64_t rows = xg.size(0), cols = xg.size(1);
  const auto [rr, rs] = buffer_dims(rows, cols, 1);
  const auto [cr, cs] = buffer_dims(cols, rows, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  FusedCast f{{at::full({rows, cols}, 0xAB, on_cuda(at::kByte)), at::full({rr, rs}, nan, on_cuda(at::kFloat)),
               at::full({cols, rows}, 0xCD, on_cuda(at::kByte)), at::full({cr, cs}, nan, on_cuda(at::kFloat))},
              at::full({cols}, nan, on_cuda(at::kFloat))};
  const int64_t ws_floats = static_cast<int64_t>(fp8t_block_quantize_workspace_bytes(rows, cols) / sizeof(float));
  const at::Tensor ws = at::full({std::max<int64_t>(ws_floats, 1)}, nan, on_cuda(at::kFloat));
  REQUIRE(fp8t_block_quantize_act(act, xg.data_ptr(), hg.defined() ? hg.data_ptr() : nullptr,
                                  xg.scalar_type() == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16, rows, cols,
                                  pow2 ? 1 : 0, f.g.row.data_ptr<uint8_t>(), f.g.row_s.data_ptr<float>(),
                                  f.g.col.data_ptr<uint8_t>(), f.g.col_s.data_ptr<float>(),
                                  want_dbias ? f.dbias.data_ptr<float>() : nullptr, ws.data_ptr(),
                                  at::cuda::getCurrentCUDAStream().stream()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return f;
}

// Codes of both layouts and every scale buffer entry (padding included) bit for bit against the
// CPU emulation's cast of `values`.
void require_cast_of(const GpuCast& g, const at::Tensor& values, bool pow2) {
  const at::Tensor v = values.cpu();
  const int64_t rows = v.size(0), cols = v.size(1);
  const fm::BlockQuantized c = fm::block_quantize_cpu(v, 1, true, true, pow2);
  require_same_codes(g.row, c.rowwise.codes, v, 1.0f);
  require_same_codes(g.col, c.columnwise.codes, v.t().contiguous(), 1.0f);
  require_same_floats(g.row_s, buffer_of(c.rowwise.scale_inv, rows, cols, 1));
  require_same_floats(g.col_s, buffer_of(c.columnwise.scale_inv, cols, rows, 1));
}

// dbias against the float64 column sums: FP32 summation of n terms in any order is within
// (n - 1) * 2^-24 * sum |v| of the exact sum (first order); n = rows.
void require_dbias(const at::Tensor& dbias, const at::Tensor& values) {
  const at::Tensor v = values.cpu().to(at::kDouble);
  const at::Tensor want = v.sum(0), bound = v.abs().sum(0) * (std::ldexp(1.0, -24) * std::max<int64_t>(1, v.size(0)));
  const at::Tensor err = (dbias.cpu().to(at::kDouble) - want).abs();
  INFO("max dbias error " << err.max().item<double>() << ", max bound " << bound.max().item<double>());
  REQUIRE((err <= bound).all().item<bool>());
}

// The shapes of the fused tests: tiny, odd, partial tiles, rows a multiple of 16 (16-byte
// columnwise stores) with partial tiles, many CTAs, the 1.3B MLP's [tokens, 4 * d_model] shape
// class (scaled down).
const std::vector<std::pair<int64_t, int64_t>> kFusedShapes = {{1, 16},     {13, 7},    {130, 257},  {144, 272},
                                                               {256, 384},  {2056, 4160}, {4096, 2048}};

}  // namespace

TEST_CASE("block_quantize_act: GELU and GELU-backward casts equal the CPU cast of the kernels' values",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (const auto& [rows, cols] : kFusedShapes) {
    if (skip_large(rows * cols)) continue;
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (int act : {FP8T_ACT_NONE, FP8T_ACT_GELU, FP8T_ACT_DGELU}) {
        // GELU inputs scaled by 2^-10 (exact) into the range where GELU bends; x of the
        // backward is dy, h the GELU input.
        const at::Tensor a = activation_like(rows, cols, dt, rows * 3 + cols).cuda();
        const at::Tensor x = act == FP8T_ACT_GELU ? a / 1024 : a;
        const at::Tensor h = act == FP8T_ACT_DGELU ? (at::randn({rows, cols}) * 2).to(dt).cuda() : at::Tensor();
        const at::Tensor values = fused_values(act, x, h);
        for (bool pow2 : {true, false}) {
          const bool dbias = act != FP8T_ACT_GELU;
          CAPTURE(rows, cols, dtype_name(dt), act_label(act), pow2);
          const FusedCast f = run_fused(act, x, h, pow2, dbias);
          require_cast_of(f.g, values, pow2);
          if (dbias) require_dbias(f.dbias, values);
        }
      }
    }
  }
}

TEST_CASE("block_quantize_act: edge values through GELU and its backward", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  at::Tensor x = at::randn({160, 272});
  const std::vector<float> edge = {inf, -inf, nan, 448.0f, -448.0f, std::ldexp(1.0f, -130), std::ldexp(1.0f, -149),
                                   -0.0f, 3.4e38f, -3.4e38f, 1e-20f, 20.0f, -20.0f};
  for (size_t i = 0; i < edge.size(); ++i) x.view(-1)[static_cast<int64_t>(i * 1013) % x.numel()] = edge[i];
  x[1].fill_(std::ldexp(1.0f, -135));  // subnormals: gelu(x) ~ x / 2, a scale from value_for_inf
  x[2].fill_(nan);
  x[3].fill_(0.0f);
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const at::Tensor xg = x.to(dt).cuda(), hg = x.flip(0).to(dt).cuda();
    for (int act : {FP8T_ACT_GELU, FP8T_ACT_DGELU}) {
      CAPTURE(dtype_name(dt), act_label(act));
      const at::Tensor h = act == FP8T_ACT_DGELU ? hg : at::Tensor();
      const at::Tensor values = fused_values(act, xg, h);
      const FusedCast f = run_fused(act, xg, h, true, false);
      require_cast_of(f.g, values, true);
    }
  }
}

TEST_CASE("block_quantize_act: the kernels' GELU values are LibTorch's within one rounding", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  // Not bit-exact by design: the device's tanhf and ATen's kernel may differ in the last FP32 bit
  // of tanh (or of its argument). Within 2 units of the dtype's last place of the value, plus
  // 1e-5 absolute: where 1 + tanh cancels (h < -3), one FP32 ulp of tanh (6e-8) times |h| / 2
  // (<= 10 here) stays below 1e-6, and one dy (|dy| < 6) times that below 1e-5.
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype_name(dt));
    const at::Tensor h = (at::randn({64, 512}) * 3).clamp(-20, 20).to(dt).cuda();
    const at::Tensor dy = at::randn({64, 512}).clamp(-6, 6).to(dt).cuda();
    const double ulp = dt == at::kFloat ? std::ldexp(1.0, -23) : std::ldexp(1.0, -7);
    const at::Tensor g = fused_values(FP8T_ACT_GELU, h, at::Tensor()).to(at::kDouble);
    const at::Tensor d = fused_values(FP8T_ACT_DGELU, dy, h).to(at::kDouble);
    const at::Tensor g_ref = at::gelu(h, "tanh").to(at::kDouble), d_ref = at::gelu_backward(dy, h, "tanh").to(at::kDouble);
    REQUIRE(((g - g_ref).abs() <= g_ref.abs() * 2 * ulp + 1e-5).all().item<bool>());
    REQUIRE(((d - d_ref).abs() <= d_ref.abs() * 2 * ulp + 1e-5).all().item<bool>());
  }
}

TEST_CASE("block_quantize_act: refused launches name the failed check", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor x = at::zeros({16, 16}, on_cuda(at::kFloat));
  const at::Tensor codes = at::zeros({16, 16}, on_cuda(at::kByte));
  const at::Tensor s = at::zeros({64}, on_cuda(at::kFloat));
  const cudaStream_t st = at::cuda::getCurrentCUDAStream().stream();
  REQUIRE(fp8t_block_quantize_act(7, x.data_ptr(), nullptr, FP8T_DTYPE_F32, 16, 16, 1, codes.data_ptr<uint8_t>(),
                                  s.data_ptr<float>(), nullptr, nullptr, nullptr, nullptr, st) == cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("unknown activation code"));
  REQUIRE(fp8t_block_quantize_act(FP8T_ACT_DGELU, x.data_ptr(), nullptr, FP8T_DTYPE_F32, 16, 16, 1,
                                  codes.data_ptr<uint8_t>(), s.data_ptr<float>(), nullptr, nullptr, nullptr, nullptr,
                                  st) == cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("no GELU input for the GELU backward"));
  REQUIRE(fp8t_block_quantize_act(FP8T_ACT_NONE, x.data_ptr(), nullptr, FP8T_DTYPE_F32, 16, 16, 1,
                                  codes.data_ptr<uint8_t>(), s.data_ptr<float>(), nullptr, nullptr, s.data_ptr<float>(),
                                  nullptr, st) == cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("dbias needs a workspace"));
  REQUIRE(fp8t_activation_values(FP8T_ACT_NONE, x.data_ptr(), nullptr, FP8T_DTYPE_F32, 4, s.data_ptr(), st) ==
          cudaErrorInvalidValue);
  REQUIRE_THAT(std::string(fp8t_last_precondition()), FP8T_CONTAINS("fp8t_activation_values"));
}

TEST_CASE("bandwidth of the fused GELU block casts (hidden; GPU)", "[.bench-block]") {
  FP8T_REQUIRE_GPU();
  if (sanitizer_run()) SKIP("not under compute-sanitizer (FP8T_TEST_SMALL): a bandwidth measurement");
  const int64_t rows = 16384, cols = 8192;  // the 1.3B MLP's hidden activation
  const at::Tensor h = at::randn({rows, cols}, on_cuda(at::kBFloat16)), dy = at::randn_like(h);
  for (int act : {FP8T_ACT_GELU, FP8T_ACT_DGELU}) {
    const at::Tensor hh = act == FP8T_ACT_DGELU ? h : at::Tensor();
    const at::Tensor x = act == FP8T_ACT_DGELU ? dy : h;
    (void)run_fused(act, x, hh, true, false);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    const FusedCast f = run_fused(act, x, hh, true, false);  // the outputs, reused below
    constexpr int kIters = 20;
    const cudaStream_t st = at::cuda::getCurrentCUDAStream().stream();
    cudaEventRecord(start, st);
    for (int i = 0; i < kIters; ++i) {
      (void)fp8t_block_quantize_act(act, x.data_ptr(), hh.defined() ? hh.data_ptr() : nullptr, FP8T_DTYPE_BF16, rows,
                                    cols, 1, f.g.row.data_ptr<uint8_t>(), f.g.row_s.data_ptr<float>(),
                                    f.g.col.data_ptr<uint8_t>(), f.g.col_s.data_ptr<float>(), nullptr, nullptr, st);
    }
    cudaEventRecord(stop, st);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    // bf16 read once (twice for the backward: dy and h) + two code copies per element.
    const double bytes = (act == FP8T_ACT_DGELU ? 6.0 : 4.0) * rows * cols;
    std::printf("fused %s block cast %lldx%lld bf16 -> both layouts: %.3f ms, %.0f GB/s\n", act_label(act),
                static_cast<long long>(rows), static_cast<long long>(cols), ms / kIters,
                bytes * kIters / (ms * 1e-3) / 1e9);
    REQUIRE(ms > 0);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

#endif  // FP8T_WITH_CUDA
