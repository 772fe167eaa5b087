// lib/gemm/gemm_problem.cpp and the host-side parts of gemm_bench.cpp: shape and format rules
// that throw before anything touches a GPU (run on every machine).
#if defined(FP8T_WITH_CUDA)

#include <string>  // std::string

#include "lib/gemm/gemm_bench.h"    // parse_bench_shape, default_bench_shapes
#include "lib/gemm/gemm_problem.h"  // GemmProblem, validate, describe
#include "lib/util/error.h"         // fp8t::Error
#include "tests/catch.h"

namespace {

using fp8t::gemm::DataType;
using fp8t::gemm::GemmProblem;

GemmProblem fp8_problem(int64_t m, int64_t k, int64_t n, const char* label) {
  GemmProblem p;
  p.m = m;
  p.k = k;
  p.n = n;
  p.label = label;
  return p;
}

std::string error_of(const GemmProblem& p) {
  try {
    fp8t::gemm::validate(p);
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("gemm validate: legal FP8 and BF16 problems pass", "[gemm]") {
  REQUIRE_NOTHROW(fp8t::gemm::validate(fp8_problem(8192, 768, 3072, "fprop")));
  REQUIRE_NOTHROW(fp8t::gemm::validate(fp8_problem(17, 48, 272, "fprop")));  // M is free
  GemmProblem mixed = fp8_problem(64, 64, 64, "dgrad");
  mixed.a_type = DataType::kE5M2;
  REQUIRE_NOTHROW(fp8t::gemm::validate(mixed));
  GemmProblem bf16 = fp8_problem(33, 100, 50, "fprop");  // no multiple-of-16 rule for BF16
  bf16.a_type = bf16.b_type = DataType::kBF16;
  bf16.trans_a = true;
  REQUIRE_NOTHROW(fp8t::gemm::validate(bf16));
}

TEST_CASE("gemm validate: errors name the GEMM, the shape and what to do", "[gemm]") {
  const std::string k_err = error_of(fp8_problem(8192, 100, 3072, "fprop"));
  REQUIRE_THAT(k_err, FP8T_CONTAINS("fp8 gemm fprop 8192x100x3072 (MxKxN"));
  REQUIRE_THAT(k_err, FP8T_CONTAINS("K=100 is not a multiple of 16 (cuBLASLt FP8 requirement)"));
  REQUIRE_THAT(k_err, FP8T_CONTAINS("keep this layer in high precision (fp8.skip_layers) or pad it"));

  // wgrad's K is the token count: the hint is about the batch, not the layer.
  REQUIRE_THAT(error_of(fp8_problem(768, 1000, 3072, "wgrad")), FP8T_CONTAINS("batch_size * seq_len"));
  REQUIRE_THAT(error_of(fp8_problem(64, 64, 40, "dgrad")), FP8T_CONTAINS("N=40 is not a multiple of 16"));

  GemmProblem e5 = fp8_problem(64, 64, 64, "wgrad");
  e5.a_type = e5.b_type = DataType::kE5M2;
  REQUIRE_THAT(error_of(e5), FP8T_CONTAINS("E5M2 x E5M2 is not supported"));

  GemmProblem nt = fp8_problem(64, 64, 64, "dgrad");
  nt.trans_b = true;
  REQUIRE_THAT(error_of(nt), FP8T_CONTAINS("TN layout"));

  GemmProblem f32_bias = fp8_problem(64, 64, 64, "fprop");
  f32_bias.out_type = DataType::kF32;
  f32_bias.has_bias = true;
  REQUIRE_THAT(error_of(f32_bias), FP8T_CONTAINS("BIAS epilogue"));

  GemmProblem mixed_hp = fp8_problem(64, 64, 64, "fprop");
  mixed_hp.b_type = DataType::kBF16;
  REQUIRE_THAT(error_of(mixed_hp), FP8T_CONTAINS("both operands must be FP8"));

  // Accumulating into the output (beta = 1) is a BF16-GEMM feature without a bias epilogue.
  GemmProblem fp8_acc = fp8_problem(64, 64, 64, "wgrad");
  fp8_acc.accumulate = true;
  REQUIRE_THAT(error_of(fp8_acc), FP8T_CONTAINS("BF16 GEMMs without bias only"));
  GemmProblem bf16_acc = fp8_problem(64, 64, 64, "head wgrad");
  bf16_acc.a_type = bf16_acc.b_type = DataType::kBF16;
  bf16_acc.out_type = DataType::kF32;
  bf16_acc.accumulate = true;
  CHECK_NOTHROW(fp8t::gemm::validate(bf16_acc));
  bf16_acc.has_bias = true;
  REQUIRE_THAT(error_of(bf16_acc), FP8T_CONTAINS("BF16 GEMMs without bias only"));
}

TEST_CASE("gemm validate: block-scaled FP8 pairings, accumulation and the 1x128 M rule", "[gemm]") {
  using fp8t::gemm::ScaleMode;
  auto block = [](int64_t m, int64_t k, int64_t n, ScaleMode a, ScaleMode b, const char* label) {
    GemmProblem p = fp8_problem(m, k, n, label);
    p.a_scale = a;
    p.b_scale = b;
    return p;
  };
  // The Linear's three GEMMs: fprop/dgrad 1x128 x 128x128, wgrad 1x128 x 1x128; partial blocks are fine.
  REQUIRE_NOTHROW(fp8t::gemm::validate(block(8192, 768, 3072, ScaleMode::kVec128, ScaleMode::kBlk128x128, "fprop")));
  REQUIRE_NOTHROW(fp8t::gemm::validate(block(320, 64, 336, ScaleMode::kVec128, ScaleMode::kBlk128x128, "dgrad")));
  REQUIRE_NOTHROW(fp8t::gemm::validate(block(3072, 8192, 768, ScaleMode::kVec128, ScaleMode::kVec128, "wgrad")));
  REQUIRE_NOTHROW(fp8t::gemm::validate(block(20, 64, 64, ScaleMode::kBlk128x128, ScaleMode::kVec128, "fprop")));
  REQUIRE(fp8t::gemm::describe(block(64, 128, 32, ScaleMode::kVec128, ScaleMode::kBlk128x128, "fprop")) ==
          "fp8 gemm fprop 64x128x32 (MxKxN, E4M3 1x128 x E4M3 128x128 -> BF16)");

  const std::string two_d = error_of(block(64, 128, 64, ScaleMode::kBlk128x128, ScaleMode::kBlk128x128, "fprop"));
  REQUIRE_THAT(two_d, FP8T_CONTAINS("fp8 gemm fprop 64x128x64"));
  REQUIRE_THAT(two_d, FP8T_CONTAINS("128x128 x 128x128 block scaling is not supported"));
  REQUIRE_THAT(error_of(block(64, 128, 64, ScaleMode::kVec128, ScaleMode::kScalar, "fprop")),
               FP8T_CONTAINS("needs a block-scaled partner"));
  GemmProblem fast = block(64, 128, 64, ScaleMode::kVec128, ScaleMode::kBlk128x128, "fprop");
  fast.fast_accum = true;
  REQUIRE_THAT(error_of(fast), FP8T_CONTAINS("split accumulation only"));
  const std::string m_err = error_of(block(20, 128, 64, ScaleMode::kVec128, ScaleMode::kBlk128x128, "fprop"));
  REQUIRE_THAT(m_err, FP8T_CONTAINS("M=20 is not a multiple of 8"));
  REQUIRE_THAT(m_err, FP8T_CONTAINS("batch_size * seq_len"));
  // The general FP8 rules still apply first.
  REQUIRE_THAT(error_of(block(64, 100, 64, ScaleMode::kVec128, ScaleMode::kVec128, "wgrad")),
               FP8T_CONTAINS("K=100 is not a multiple of 16"));
}

TEST_CASE("gemm validate_fp8_device: compute capability below 8.9 is refused by name", "[gemm]") {
  REQUIRE_NOTHROW(fp8t::gemm::validate_fp8_device(9, 0, "NVIDIA H200"));
  REQUIRE_NOTHROW(fp8t::gemm::validate_fp8_device(8, 9, "NVIDIA L4"));
  REQUIRE_THROWS_WITH(fp8t::gemm::validate_fp8_device(8, 0, "NVIDIA A100"),
                      FP8T_CONTAINS("NVIDIA A100 is 8.0"));
}

TEST_CASE("bench-gemm shapes: MxKxN parsing and the reference shapes", "[gemm]") {
  const auto s = fp8t::gemm::parse_bench_shape("8192x768x3072");
  REQUIRE(s.m == 8192);
  REQUIRE(s.k == 768);
  REQUIRE(s.n == 3072);
  REQUIRE(fp8t::gemm::to_string(s) == "8192x768x3072");
  for (const char* bad : {"", "8192x768", "8192x768x", "axbxc", "0x16x16", "1x2x3x4", "-1x16x16"}) {
    CAPTURE(bad);
    REQUIRE_THROWS_WITH(fp8t::gemm::parse_bench_shape(bad), FP8T_CONTAINS("expected MxKxN"));
  }
  REQUIRE(fp8t::gemm::default_bench_shapes().size() == 6);
  for (const auto& shape : fp8t::gemm::default_bench_shapes()) {
    REQUIRE_NOTHROW(fp8t::gemm::validate(fp8_problem(shape.m, shape.k, shape.n, "bench")));
  }
}

#endif  // FP8T_WITH_CUDA
