// lib/gemm/gemm_engine.cpp's block-scaled FP8 GEMM on the GPU (cuBLASLt VEC128_32F /
// BLK128x128_32F): the Linear's three GEMMs under block scaling against float64 products of the
// dequantized operands, the 128x128 x 1x128 pairing, the bias epilogue, plan caching and the
// errors of illegal problems.
#if defined(FP8T_WITH_CUDA)

#include <cmath>     // std::ldexp
#include <cstdio>    // std::printf
#include <optional>  // std::nullopt
#include <string>    // std::string
#include <tuple>     // std::tuple
#include <vector>    // std::vector

#include "lib/fp8/backends/block_quantize.h"  // block_quantize, expand_block_scales, BlockCodes
#include "lib/fp8/backends/cpu_backend.h"     // decode_codes
#include "lib/gemm/gemm_engine.h"             // block_fp8_gemm, BlockScaledOperand, GemmEngine
#include "lib/util/error.h"                   // fp8t::Error
#include "tests/kernels/cuda_test_util.h"

namespace {

using fp8t::fp8::Format;
using fp8t::gemm::BlockScaledOperand;
using fp8t::gemm::ScaleMode;
using namespace fp8t::test;

// The dequantized operand in float64: decode(code) * scale_inv of its block, both exact in float64.
at::Tensor dequant64(const fp8t::fp8::BlockCodes& q, int block_rows) {
  const int64_t rows = q.codes.size(0), k = q.codes.size(1);
  return fp8t::fp8::decode_codes(q.codes.cpu(), Format::kE4M3).to(at::kDouble) *
         fp8t::fp8::expand_block_scales(q.scale_inv.cpu(), rows, k, block_rows).to(at::kDouble);
}

BlockScaledOperand operand(const fp8t::fp8::BlockCodes& q, int block_rows) {
  return BlockScaledOperand{q.codes, q.scale_inv, Format::kE4M3,
                            block_rows == 1 ? ScaleMode::kVec128 : ScaleMode::kBlk128x128};
}

// A tensor with a different magnitude in every row and column block, so that block scales matter.
at::Tensor blocky(int64_t rows, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor row_mag = at::pow(2.0, at::randint(-6, 6, {rows, 1}, at::kFloat));
  const at::Tensor col_mag = at::pow(2.0, at::randint(-6, 6, {1, cols}, at::kFloat));
  return (at::randn({rows, cols}) * row_mag * col_mag).cuda().to(at::kBFloat16);
}

// Tolerance of a GEMM output against the float64 product, relative Frobenius: BF16 output rounds
// every element by up to 2^-9 relative -> 2^-8; FP32 output: the split accumulator promotes the
// tensor cores' partial sums (about 14 bits) to FP32 regularly -> 2^-10 (as the per-tensor test).
double tolerance(at::ScalarType out) { return out == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -10); }

}  // namespace

TEST_CASE("block gemm: fprop, dgrad and wgrad within output rounding of float64", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  // (tokens M, in K, out N): TE's odd shapes (partial blocks in every dim), GPT-2 widths, larger.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {256, 256, 256}, {320, 128, 336}, {320, 64, 336}, {16, 128, 128}, {512, 768, 2304}, {1024, 1024, 2048}};
  double worst[3] = {0, 0, 0};
  for (const auto& [m, k, n] : shapes) {
    if (skip_large(m * k + k * n)) continue;
    const at::Tensor x = blocky(m, k, m + k), w = blocky(n, k, n * 3 + k), dy = blocky(m, n, m * 5 + n);
    for (bool pow2 : {true, false}) {
      const auto xq = fp8t::fp8::block_quantize(x, 1, true, true, pow2);
      const auto wq = fp8t::fp8::block_quantize(w, 128, true, true, pow2);
      const auto dyq = fp8t::fp8::block_quantize(dy, 1, true, true, pow2);
      struct Role {
        const char* name;
        fp8t::fp8::BlockCodes a;
        int a_rows;
        fp8t::fp8::BlockCodes b;
        int b_rows;
      };
      const std::vector<Role> roles = {{"fprop", xq.rowwise, 1, wq.rowwise, 128},      // y = x · Wᵀ
                                       {"dgrad", dyq.rowwise, 1, wq.columnwise, 128},  // dx = dy · W
                                       {"wgrad", dyq.columnwise, 1, xq.columnwise, 1}};  // dW = dyᵀ · x
      for (size_t r = 0; r < roles.size(); ++r) {
        const Role& role = roles[r];
        const at::Tensor ref = at::mm(dequant64(role.a, role.a_rows), dequant64(role.b, role.b_rows).t());
        for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
          CAPTURE(role.name, m, k, n, pow2, dtype_name(out));
          const at::Tensor got = fp8t::gemm::block_fp8_gemm(operand(role.a, role.a_rows), operand(role.b, role.b_rows),
                                                            at::Tensor(), out, role.name);
          REQUIRE(got.scalar_type() == out);
          REQUIRE(got.sizes() == ref.sizes());
          const double err = rel_frobenius(got, ref);
          CAPTURE(err);
          REQUIRE(err <= tolerance(out));
          if (out == at::kBFloat16) worst[r] = std::max(worst[r], err);
        }
      }
    }
  }
  if (reporting()) {
    std::printf("block gemm worst rel. Frobenius error (bf16 out): fprop %.2e, dgrad %.2e, wgrad %.2e\n", worst[0],
                worst[1], worst[2]);
  }
}

TEST_CASE("block gemm: 128x128 x 1x128, bias epilogue, one plan per problem", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor a = blocky(192, 384, 1), b = blocky(256, 384, 2);
  const auto aq = fp8t::fp8::block_quantize(a, 128, true, false, true);
  const auto bq = fp8t::fp8::block_quantize(b, 1, true, false, true);
  const at::Tensor bias = at::randn({256}).to(at::kBFloat16).to(at::kFloat);  // exact in bf16
  const at::Tensor ref = at::mm(dequant64(aq.rowwise, 128), dequant64(bq.rowwise, 1).t()) + bias.to(at::kDouble);
  const at::Tensor y1 =
      fp8t::gemm::block_fp8_gemm(operand(aq.rowwise, 128), operand(bq.rowwise, 1), bias.cuda(), at::kBFloat16, "test");
  const size_t plans = fp8t::gemm::GemmEngine::instance().cached_plans();
  const at::Tensor y2 =
      fp8t::gemm::block_fp8_gemm(operand(aq.rowwise, 128), operand(bq.rowwise, 1), bias.cuda(), at::kBFloat16, "test");
  REQUIRE(fp8t::gemm::GemmEngine::instance().cached_plans() == plans);
  REQUIRE(at::equal(y1, y2));
  REQUIRE(rel_frobenius(y1, ref) <= std::ldexp(1.0, -8));
  const at::Tensor y32 =
      fp8t::gemm::block_fp8_gemm(operand(aq.rowwise, 128), operand(bq.rowwise, 1), bias.cuda(), at::kFloat, "test");
  REQUIRE(rel_frobenius(y32, ref) <= std::ldexp(1.0, -10));  // bias added after the GEMM
}

TEST_CASE("block gemm: illegal problems are refused by name", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  const auto w1 = fp8t::fp8::block_quantize(blocky(64, 128, 3), 128, true, false, true);
  const auto w2 = fp8t::fp8::block_quantize(blocky(32, 128, 4), 128, true, false, true);
  const auto x12 = fp8t::fp8::block_quantize(blocky(12, 128, 5), 1, true, false, true);
  const auto x16 = fp8t::fp8::block_quantize(blocky(16, 128, 6), 1, true, false, true);
  try {
    (void)fp8t::gemm::block_fp8_gemm(operand(w1.rowwise, 128), operand(w2.rowwise, 128), at::Tensor(), at::kBFloat16,
                                     "fprop");
    FAIL("128x128 x 128x128 was accepted");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("fp8 gemm fprop 64x128x32"));
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("128x128 x 128x128"));
  }
  REQUIRE_THROWS_WITH(fp8t::gemm::block_fp8_gemm(operand(x12.rowwise, 1), operand(w2.rowwise, 128), at::Tensor(),
                                                 at::kBFloat16, "fprop"),
                      FP8T_CONTAINS("M=12 is not a multiple of 8"));
  // A scale grid that is not the layout of the operand's mode.
  BlockScaledOperand bad = operand(w1.rowwise, 128);
  bad.mode = ScaleMode::kVec128;
  REQUIRE_THROWS_WITH(fp8t::gemm::block_fp8_gemm(operand(x16.rowwise, 1), bad, at::Tensor(), at::kBFloat16, "fprop"),
                      FP8T_CONTAINS("1x128 scale_inv must be [64, 1] float32"));
}

TEST_CASE("block gemm: fprop agrees with at::_scaled_mm's block-scaled path", "[gemm][cuda]") {
  FP8T_REQUIRE_GPU();
  // x [M,K] 1x128 and W [N,K] 128x128 with K/128 = 8 (no scale-row padding, the layout PyTorch
  // checks): scale_a [M, K/128] strides (1, M); scale_b = W's grid transposed, [K/128, N/128].
  const int64_t m = 256, k = 1024, n = 384;
  const auto xq = fp8t::fp8::block_quantize(blocky(m, k, 11), 1, true, false, true);
  const auto wq = fp8t::fp8::block_quantize(blocky(n, k, 12), 128, true, false, true);
  const at::Tensor ours = fp8t::gemm::block_fp8_gemm(operand(xq.rowwise, 1), operand(wq.rowwise, 128), at::Tensor(),
                                                     at::kBFloat16, "fprop");
  at::Tensor theirs;
  try {
    theirs = at::_scaled_mm(xq.rowwise.codes.view(at::kFloat8_e4m3fn), wq.rowwise.codes.view(at::kFloat8_e4m3fn).t(),
                            xq.rowwise.scale_inv, wq.rowwise.scale_inv.t(), std::nullopt, std::nullopt, at::kBFloat16,
                            false);
  } catch (const c10::Error& e) {
    SKIP("at::_scaled_mm has no block-scaled path in this LibTorch: " << e.what_without_backtrace());
  }
  // Both are bf16 roundings of FP32 block-scaled sums (possibly different kernels): 2^-8.
  REQUIRE(rel_frobenius(ours, theirs.to(at::kDouble)) <= std::ldexp(1.0, -8));
  if (reporting()) std::printf("block gemm vs at::_scaled_mm: rel. Frobenius %.2e\n", rel_frobenius(ours, theirs));
}

#endif  // FP8T_WITH_CUDA
