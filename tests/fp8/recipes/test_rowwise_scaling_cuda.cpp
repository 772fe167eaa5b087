// RowwiseScaling on the CUDA backend: the casts of kernels/rowwise_quantize.cu against the CPU
// emulation bit for bit (codes and scales, both layouts, fp32 and bf16, hostile rows); cuBLASLt's
// OUTER_VEC_32F GEMM against the FP32 GEMM of the same dequantized operands; an Fp8Linear's
// forward and backward against the CPU emulation; a GPT trained a few steps on the GPU.
#include <torch/torch.h>  // torch::randn

#include <cstdio>  // std::printf
#include <limits>  // std::numeric_limits

#include "lib/fp8/backends/rowwise_quantize.h"  // rowwise_quantize_cpu, rowwise_gemm, rowwise_dequantize
#include "lib/fp8/layers/fp8_linear.h"          // Fp8Linear
#include "lib/fp8/recipes/rowwise_scaling.h"    // RowwiseScaling
#include "tests/catch.h"
#include "tests/tensor_compare.h"  // test::rel_err
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, reporting

using namespace fp8t::fp8;

#if defined(FP8T_WITH_CUDA)
using fp8t::test::rel_err;

namespace {

void require_same(const Fp8Operand& got, const Fp8Operand& want) {
  REQUIRE(got.scale_layout == ScaleLayout::kRowwise);
  REQUIRE(got.codes.is_cuda());
  REQUIRE(at::equal(got.codes.cpu(), want.codes));
  REQUIRE(at::equal(got.scale_inv.cpu(), want.scale_inv));
}

at::Tensor hostile(int64_t rows, int64_t cols) {
  at::Tensor x = torch::randn({rows, cols}) * at::pow(2.0, torch::randint(-20, 20, {rows, 1}));
  if (rows > 3 && cols > 5) {
    x[0].zero_();
    x[1][3] = std::nanf("");
    x[2][5] = std::numeric_limits<float>::infinity();
    x[3].fill_(1e-40f);
  }
  return x;
}

}  // namespace

TEST_CASE("rowwise scaling on CUDA: both layouts' codes and scales equal the CPU emulation's, bit for bit",
          "[fp8][kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  torch::manual_seed(17);
  const at::Device gpu(at::kCUDA, 0);
  // Odd sizes (tile edges of the 32x32 cast-transpose, rows of one element, more rows than one
  // column-amax chunk of 256), a GEMM-sized one, and the hostile rows.
  const int64_t shapes[][2] = {{1, 16}, {7, 33}, {33, 7}, {300, 48}, {513, 1000}, {2048, 1024}, {64, 4096}};
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const auto& s : shapes) {
      INFO("shape " << s[0] << "x" << s[1] << " dtype " << dtype);
      const at::Tensor x = hostile(s[0], s[1]).to(dtype);
      const Fp8Tensor want = rowwise_quantize_cpu(x, true, true);
      const Fp8Tensor got = rowwise_quantize(x.to(gpu), true, true);
      require_same(got.rowwise, want.rowwise);
      require_same(got.columnwise, want.columnwise);
    }
  }
}

TEST_CASE("rowwise scaling on CUDA: the OUTER_VEC_32F GEMM against the FP32 GEMM of the dequantized operands",
          "[fp8][gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  torch::manual_seed(19);
  const at::Device gpu(at::kCUDA, 0);
  const at::Tensor x = torch::randn({256, 512}) * at::pow(2.0, torch::randint(-8, 8, {256, 1}));
  const at::Tensor w = torch::randn({384, 512}) * 0.05;
  const at::Tensor bias = torch::randn({384});
  const Fp8Tensor qx = rowwise_quantize(x.to(gpu), true, false), qw = rowwise_quantize(w.to(gpu), true, false);
  const at::Tensor want = at::mm(rowwise_dequantize(qx.rowwise).cpu().to(at::kDouble),
                                 rowwise_dequantize(qw.rowwise).cpu().to(at::kDouble).t()) +
                          bias.to(at::kDouble);
  const at::Tensor bias_gpu = bias.to(gpu);
  const at::Tensor split = rowwise_gemm(qx.rowwise, qw.rowwise, bias_gpu, at::kFloat, GemmKind::kDgrad, false);
  const at::Tensor fast = rowwise_gemm(qx.rowwise, qw.rowwise, bias_gpu, at::kFloat, GemmKind::kFprop, true);
  const at::Tensor bf16 = rowwise_gemm(qx.rowwise, qw.rowwise, bias_gpu, at::kBFloat16, GemmKind::kFprop, true);
  const double e_split = rel_err(split, want), e_fast = rel_err(fast, want), e_bf16 = rel_err(bf16, want);
  if (fp8t::test::reporting()) {
    std::printf("rowwise gemm rel err: split %.3g, fast %.3g, bf16 out %.3g\n", e_split, e_fast, e_bf16);
  }
  // The same exact products summed on the tensor cores against float64 sums. Seen on an H100
  // (b3b3ef6): split accumulation 1.27e-4, fast accumulation 3.48e-4 (fewer bits between its
  // promotions to FP32), BF16 output 1.68e-3 (each element also rounded to 8 bits). The bounds
  // sit about 2x above.
  CHECK(e_split < 3e-4);
  CHECK(e_fast < 7e-4);
  CHECK(e_bf16 < 3e-3);
  // A wrong scale vector (per-tensor instead of per-row) is refused naming the operand.
  Fp8Operand bad = qw.rowwise;
  bad.scale_inv = at::ones({}, bad.scale_inv.options());
  REQUIRE_THROWS_WITH(rowwise_gemm(qx.rowwise, bad, bias_gpu, at::kFloat, GemmKind::kFprop, false),
                      FP8T_CONTAINS("row-wise scale_inv must be [384]"));
}

TEST_CASE("rowwise scaling: Fp8Linear on CUDA matches the CPU emulation", "[fp8][cuda]") {
  FP8T_REQUIRE_GPU();
  torch::manual_seed(23);
  fp8t::model::Linear src(384, 272, true);
  {
    torch::NoGradGuard g;
    src.bias.normal_(0.0, 0.1);
  }
  const at::Device gpu(at::kCUDA, 0);
  const auto make = [&](const at::Device& device) {
    fp8t::model::Linear copy(src.in_features, src.out_features, true);
    {
      torch::NoGradGuard g;
      copy.weight.copy_(src.weight);
      copy.bias.copy_(src.bias);
    }
    copy.to(device);
    Recipe r;
    r.kind = RecipeKind::kRowwise;
    r.fast_accumulation.fprop = false;  // compare split accumulation with the CPU's FP32 sums
    auto scaling = std::make_shared<RowwiseScaling>(r);
    auto layer = std::make_shared<Fp8Linear>(copy, "fc", scaling);
    scaling->finalize(device);
    return std::make_pair(scaling, layer);
  };
  auto [cpu_scaling, cpu] = make(at::kCPU);
  auto [gpu_scaling, cuda] = make(gpu);
  for (int step = 0; step < 2; ++step) {
    const at::Tensor x = torch::randn({96, 384}) * at::pow(2.0, torch::randint(-8, 8, {96, 1}));
    const at::Tensor dy = torch::randn({96, 272}) * 1e-3;
    const at::Tensor xc = x.clone().requires_grad_(), xg = x.to(gpu).requires_grad_();
    const at::Tensor yc = cpu->forward(xc), yg = cuda->forward(xg);
    yc.backward(dy);
    yg.backward(dy.to(gpu));
    INFO("step " << step);
    // Same codes and scales on both sides (the case above); the tensor cores' split accumulation
    // against the CPU's FP32 sums: 1e-3 relative (the block recipe's bound for this comparison).
    CHECK(rel_err(yg, yc) < 1e-3);
    CHECK(rel_err(xg.grad(), xc.grad()) < 1e-3);
    CHECK(rel_err(cuda->weight.grad(), cpu->weight.grad()) < 1e-3);
    CHECK(rel_err(cuda->bias.grad(), cpu->bias.grad()) < 1e-5);
    cpu_scaling->end_micro_batch(true);
    gpu_scaling->end_micro_batch(true);
    cpu->zero_grad();
    cuda->zero_grad();
  }
}
#endif
