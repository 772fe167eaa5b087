// kernels/cast_transpose.cu: both layouts bit-exact from one read, fused amax, fused dbias,
// and the plain code transpose.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include <cmath>   // std::ldexp
#include <vector>  // std::vector

#include "fp8t_kernels.h"                   // fp8t_cast_transpose*, fp8t_transpose_codes
#include "lib/fp8/backends/cuda_backend.h"  // cuda_backend
#include "tests/kernels/cuda_test_util.h"

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

at::Tensor grad_like_input(int64_t rows, int64_t cols, at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, cols}, at::kFloat) * at::pow(2.0, at::randint(-8, 8, {rows, cols}, at::kFloat));
  x.view({-1}).slice(0, 0, x.numel(), 11).zero_();
  return x.to(dtype);
}

// [rows, cols] shapes: tiny, the TE odd shapes, non-multiples of 8 (scalar edges), one tile,
// a partial edge tile in both directions, and large ones. Without dbias the 128x64 tiled kernel
// runs: 16-byte paths when rows % 16 == 0 and cols % 8 == 0 ({144, 200}: vector tiles and
// partial edge tiles in both directions; {2048, 4160}: many full tiles, more than one wave),
// element paths otherwise ({2056, 4160}: rows % 16 == 8; {130, 200}).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 16},   {60, 160},  {217, 256},  {64, 64},
                                                          {100, 72}, {13, 7},    {130, 200},  {144, 200},
                                                          {128, 64}, {16, 8},    {2048, 4160}, {2056, 4160}};

}  // namespace

TEST_CASE("cast_transpose: rowwise and columnwise codes bit-exact, amax exact", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, cols] : kShapes) {
        if (skip_large(rows * cols)) continue;
        CAPTURE(fp8t::fp8::format_name(f), dtype_name(dt), rows, cols);
        const float scale = f == Format::kE4M3 ? 8.0f : 256.0f;
        const at::Tensor x = grad_like_input(rows, cols, dt, rows * 1000 + cols);
        const at::Tensor xg = x.cuda();
        const at::Tensor scale_t = at::full({}, scale, on_cuda(at::kFloat));
        at::Tensor amax = at::full({}, 0.125f, on_cuda(at::kFloat));
        at::Tensor sinv = at::full({}, -1.0f, on_cuda(at::kFloat));
        at::Tensor row = at::full({rows, cols}, 0xAB, on_cuda(at::kByte));
        at::Tensor col = at::full({cols, rows}, 0xCD, on_cuda(at::kByte));
        REQUIRE(fp8t_cast_transpose(xg.data_ptr(), dt == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16, rows, cols,
                                    scale_t.data_ptr<float>(),
                                    f == Format::kE4M3 ? FP8T_FORMAT_E4M3 : FP8T_FORMAT_E5M2,
                                    row.data_ptr<uint8_t>(), col.data_ptr<uint8_t>(), amax.data_ptr<float>(),
                                    sinv.data_ptr<float>(), s) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        require_same_codes(row, host_encode(x, scale, f), x, scale);
        const at::Tensor xt = x.t().contiguous();
        require_same_codes(col, host_encode(xt, scale, f), xt, scale);
        REQUIRE(same_bits(amax.item<float>(), host_amax(x, 0.125f)));
        REQUIRE(same_bits(sinv.item<float>(), 1.0f / scale));
      }
    }
  }
}

TEST_CASE("cast_transpose_dbias: codes exact and dbias within the FP32 summation bound", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, cols] : kShapes) {
      if (skip_large(rows * cols)) continue;
      CAPTURE(dtype_name(dt), rows, cols);
      const at::Tensor x = grad_like_input(rows, cols, dt, rows + 7 * cols);
      fp8t::fp8::SlotRef slot;
      slot.scale = at::full({}, 512.0f, on_cuda(at::kFloat));
      slot.amax = at::zeros({}, on_cuda(at::kFloat));
      slot.format = Format::kE5M2;
      at::Tensor dbias;
      const auto q = gpu.quantize_grad(x.cuda(), slot, true, &dbias);
      require_same_codes(q.rowwise.codes, host_encode(x, 512.0f, Format::kE5M2), x, 512.0f);
      const at::Tensor xt = x.t().contiguous();
      require_same_codes(q.columnwise.codes, host_encode(xt, 512.0f, Format::kE5M2), xt, 512.0f);
      REQUIRE(same_bits(slot.amax.item<float>(), host_amax(x, 0.0f)));
      REQUIRE(dbias.scalar_type() == at::kFloat);
      REQUIRE(dbias.sizes() == at::IntArrayRef{cols});

      // Tolerance: recursive FP32 summation of n terms errs by at most ~n * 2^-24 * sum|x|; the
      // kernel sums 64-row tiles, then the tiles, so n = 64 + ceil(rows / 64).
      const at::Tensor xd = x.to(at::kDouble);
      const at::Tensor ref = xd.sum(0);
      const at::Tensor bound = xd.abs().sum(0) * ((64.0 + (rows + 63) / 64) * std::ldexp(1.0, -24)) + 1e-30;
      const at::Tensor err = (dbias.cpu().to(at::kDouble) - ref).abs();
      INFO("max error / bound = " << (err / bound).max().item<double>());
      REQUIRE((err <= bound).all().item<bool>());
    }
  }
}

namespace {

// Codes that differ from `want` must be rare and adjacent: the kernel evaluates GELU in FP32
// with LibTorch's operation order, but tanhf and FMA contraction may round an FP32 result one
// ulp differently from LibTorch's kernel, which can move the rounded value to the next bf16 or
// FP8 code. Bound: at most 1 in 1000 codes differ, each by one code step.
void require_nearly_same_codes(const at::Tensor& got_gpu, const at::Tensor& want) {
  const at::Tensor got = got_gpu.cpu().to(at::kInt), w = want.to(at::kInt);
  REQUIRE(got.sizes() == w.sizes());
  const at::Tensor diff = (got - w).abs();
  const int64_t n_diff = diff.ne(0).sum().item<int64_t>();
  INFO(n_diff << " of " << got.numel() << " codes differ");
  REQUIRE(n_diff * 1000 <= got.numel());
  REQUIRE(diff.max().item<int>() <= 1);
}

}  // namespace

TEST_CASE("gelu casts: the codes of casting at::gelu and at::gelu_backward, without writing them",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, cols] : kShapes) {
      if (skip_large(rows * cols)) continue;
      CAPTURE(dtype_name(dt), rows, cols);
      at::manual_seed(rows * 31 + cols);
      const at::Tensor h = (at::randn({rows, cols}) * 3.0).to(dt).cuda();
      const at::Tensor dy = grad_like_input(rows, cols, dt, rows + 5 * cols).cuda();

      fp8t::fp8::SlotRef in;
      in.scale = at::full({}, 64.0f, on_cuda(at::kFloat));
      in.amax = at::zeros({}, on_cuda(at::kFloat));
      in.format = Format::kE4M3;
      const auto q = gpu.quantize(fp8t::fp8::CastSource::gelu(h), in, {/*rowwise=*/true, /*columnwise=*/true});
      const at::Tensor y = at::gelu(h, "tanh").cpu();  // the unfused operator's output
      require_nearly_same_codes(q.rowwise.codes, host_encode(y, 64.0f, Format::kE4M3));
      require_nearly_same_codes(q.columnwise.codes, host_encode(y.t().contiguous(), 64.0f, Format::kE4M3));
      // amax of the rounded GELU output: within one bf16 step (2^-8 relative) of the operator's.
      REQUIRE(in.amax.item<double>() == Approx(y.abs().max().item<double>()).epsilon(1.0 / 256));

      fp8t::fp8::SlotRef grad;
      grad.scale = at::full({}, 512.0f, on_cuda(at::kFloat));
      grad.amax = at::zeros({}, on_cuda(at::kFloat));
      grad.format = Format::kE5M2;
      at::Tensor dbias;
      const auto g = gpu.quantize(fp8t::fp8::CastSource::dgelu(dy, h), grad, {true, true, &dbias});
      const at::Tensor dh = at::gelu_backward(dy, h, "tanh").cpu();
      require_nearly_same_codes(g.rowwise.codes, host_encode(dh, 512.0f, Format::kE5M2));
      require_nearly_same_codes(g.columnwise.codes, host_encode(dh.t().contiguous(), 512.0f, Format::kE5M2));
      REQUIRE(grad.amax.item<double>() == Approx(dh.abs().max().item<double>()).epsilon(1.0 / 256));
      // dbias: the FP32 summation bound of the dbias test, plus one bf16 step per element for
      // the rare elements rounded differently.
      const at::Tensor dd = dh.to(at::kDouble);
      const at::Tensor bound = dd.abs().sum(0) * ((64.0 + (rows + 63) / 64) * std::ldexp(1.0, -24) + 1.0 / 256) + 1e-30;
      REQUIRE(((dbias.cpu().to(at::kDouble) - dd.sum(0)).abs() <= bound).all().item<bool>());
    }
  }
}

TEST_CASE("transpose_codes: byte transpose of FP8 codes", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (const auto& [rows, cols] : kShapes) {
    CAPTURE(rows, cols);
    const at::Tensor in = at::randint(0, 256, {rows, cols}, on_cuda(at::kByte));
    at::Tensor out = at::full({cols, rows}, 0xEE, on_cuda(at::kByte));
    REQUIRE(fp8t_transpose_codes(in.data_ptr<uint8_t>(), rows, cols, out.data_ptr<uint8_t>(), s) == cudaSuccess);
    REQUIRE(first_mismatch(out, in.t().contiguous()) == -1);
  }
}

TEST_CASE("cast_transpose: precondition violations return cudaErrorInvalidValue", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  const at::Tensor x = at::ones({16, 16}, on_cuda(at::kFloat));
  at::Tensor codes = at::empty({16, 16}, on_cuda(at::kByte));
  at::Tensor dbias = at::empty({16}, on_cuda(at::kFloat));
  REQUIRE(fp8t_cast_transpose(x.data_ptr(), FP8T_DTYPE_F32, 16, 16, nullptr, FP8T_FORMAT_E4M3,
                              codes.data_ptr<uint8_t>(), nullptr, nullptr, nullptr, s) == cudaErrorInvalidValue);
  // dbias without a workspace
  REQUIRE(fp8t_cast_transpose_dbias(x.data_ptr(), FP8T_DTYPE_F32, 16, 16, x.data_ptr<float>(), FP8T_FORMAT_E4M3,
                                    codes.data_ptr<uint8_t>(), nullptr, nullptr, nullptr, dbias.data_ptr<float>(),
                                    nullptr, s) == cudaErrorInvalidValue);
  REQUIRE(fp8t_cast_transpose_dbias_workspace_bytes(130, 200) == 3 * 200 * sizeof(float));
}

#endif  // FP8T_WITH_CUDA
