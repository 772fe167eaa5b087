// lib/fp8/layers/fp8_grouped_linear.* and the grouped GEMMs of the CPU emulation
// (Backend::grouped_gemm, grouped_gemm_wgrad), under every recipe with a grouped GEMM; the rewrite
// of a mixture-of-experts model's grouped layers.
#include "lib/fp8/layers/fp8_grouped_linear.h"

#include <torch/torch.h>  // torch::randn

#include <cmath>   // std::isfinite
#include <memory>  // std::shared_ptr
#include <string>  // std::string

#include "lib/fp8/rewrite.h"          // rewrite_to_fp8
#include "lib/model/model.h"          // model::build
#include "lib/ops/grouped_linear.h"   // ops::grouped_linear_per_group
#include "tests/catch.h"
#include "tests/model/moe_test_config.h"  // test::tiny_moe
#include "tests/tensor_compare.h"  // test::rel_err

using namespace fp8t;
using namespace fp8t::fp8;

using fp8t::test::rel_err;

namespace {

constexpr int64_t kGroups = 3, kIn = 32, kOut = 48;

Recipe recipe_of(RecipeKind kind) {
  Recipe r;
  r.kind = kind;
  return r;
}

struct Fixture {
  std::shared_ptr<Scaling> scaling;
  std::shared_ptr<Fp8GroupedLinear> layer;
  at::Tensor offsets = torch::tensor({16, 48, 64}, at::kInt);  // groups of 16, 32 and 16 rows
  explicit Fixture(RecipeKind kind) {
    torch::manual_seed(31);
    model::GroupedLinear src(kGroups, kIn, kOut, 2.0);
    scaling = make_scaling(recipe_of(kind));
    layer = std::make_shared<Fp8GroupedLinear>(src, "experts", scaling);
    scaling->finalize(at::kCPU);
  }
};

// Rows [begin, begin + n) of an operand, for the per-group dense reference.
Fp8Operand rows_of(const Fp8Operand& op, int64_t begin, int64_t n) {
  Fp8Operand out = op;
  out.codes = op.codes.narrow(0, begin, n);
  if (op.scale_layout == ScaleLayout::kRowwise) out.scale_inv = op.scale_inv.narrow(0, begin, n);
  return out;
}

// x [64, 32]: the third group's 16 rows are padding (zeros), as a dispatch buffer's would be.
at::Tensor input() {
  at::Tensor x = torch::randn({64, kIn});
  x.narrow(0, 48, 16).zero_();
  return x;
}

}  // namespace

TEST_CASE("fp8 grouped linear: each group is the dense FP8 GEMM of its rows and its expert's weight", "[fp8]") {
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kRowwise}) {
    CAPTURE(to_string(kind));
    Fixture f(kind);
    const at::Tensor x = input();
    const at::Tensor y = f.layer->forward(x, f.offsets);
    REQUIRE(y.sizes() == at::IntArrayRef({64, kOut}));
    // The same casts again, recording nothing: the operands the layer multiplied.
    const NoRecordScope no_record;
    CastOptions opt;
    opt.record = false;
    const Fp8Operand xq = f.scaling->quantize(f.layer->slot_input(), CastSource::tensor(x), opt).rowwise;
    const Fp8Operand wq = f.layer->weight_fp8(false, false).rowwise;
    Backend& cpu = backend_for(at::kCPU);
    const int64_t starts[] = {0, 16, 48}, sizes[] = {16, 32, 16};
    for (int64_t g = 0; g < kGroups; ++g) {
      const at::Tensor dense = cpu.gemm(rows_of(xq, starts[g], sizes[g]), rows_of(wq, g * kOut, kOut), at::Tensor(),
                                        at::kFloat, GemmKind::kFprop, false);
      CHECK(at::equal(y.narrow(0, starts[g], sizes[g]), dense));  // bit for bit: the emulation's own GEMM
    }
    CHECK(y.narrow(0, 48, 16).abs().max().item<double>() == 0.0);  // padding rows in, zero rows out
    // Against the high-precision grouped product: E4M3 inputs (3 mantissa bits, relative rounding
    // up to 2^-4) over K = 32; seen 0.037 to 0.043 relative Frobenius over the three recipes.
    const at::Tensor ref = ops::grouped_linear_per_group(x, f.layer->weight.detach(), f.offsets);
    CHECK(rel_err(y.narrow(0, 0, 48), ref.narrow(0, 0, 48)) < 0.05);
  }
}

TEST_CASE("fp8 grouped linear: dgrad and wgrad in FP8, an all-padding group's gradient exactly zero", "[fp8]") {
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kRowwise}) {
    CAPTURE(to_string(kind));
    Fixture f(kind);
    const at::Tensor x = input().requires_grad_(true);
    at::Tensor dy = torch::randn({64, kOut});
    dy.narrow(0, 48, 16).zero_();  // the buffer's gradient is zero on padding rows
    f.layer->forward(x, f.offsets).backward(dy);
    const at::Tensor dw = f.layer->weight.grad();
    REQUIRE(dw.sizes() == at::IntArrayRef({kGroups, kOut, kIn}));
    CHECK(dw.scalar_type() == at::kFloat);
    CHECK(dw.isfinite().all().item<bool>());
    CHECK(dw[2].abs().max().item<double>() == 0.0);  // group 2 holds only padding rows
    // Against high precision: dx = dy_g W_g, dW_g = dy_g^T x_g (E4M3 gradients, BF16 wgrad output;
    // the same bound as the forward's, seen 0.037 to 0.043).
    const at::Tensor w = f.layer->weight.detach();
    const at::Tensor dx_ref = at::cat({at::mm(dy.narrow(0, 0, 16), w[0]), at::mm(dy.narrow(0, 16, 32), w[1]),
                                       at::mm(dy.narrow(0, 48, 16), w[2])});
    CHECK(rel_err(x.grad().narrow(0, 0, 48), dx_ref.narrow(0, 0, 48)) < 0.05);
    const at::Tensor dw0 = at::mm(dy.narrow(0, 0, 16).t(), x.detach().narrow(0, 0, 16));
    CHECK(rel_err(dw[0], dw0) < 0.05);
  }
}

TEST_CASE("fp8 grouped linear: every slot is E4M3 under HYBRID", "[fp8]") {
  Fixture f(RecipeKind::kDelayed);  // fp8.fp8_format HYBRID by default: E5M2 gradients elsewhere
  CHECK(f.scaling->slot_format(f.layer->slot_grad_output()) == Format::kE4M3);
  CHECK(f.scaling->slot_format(f.layer->slot_input()) == Format::kE4M3);
}

TEST_CASE("fp8 rewrite: a mixture of experts' grouped layers, in FP8 or kept with the reason", "[fp8]") {
  const ModelSection m = test::tiny_moe(/*d_model=*/32, /*d_ff=*/32, /*experts=*/4);
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock, RecipeKind::kRowwise}) {
    CAPTURE(to_string(kind));
    torch::manual_seed(1);
    auto model = model::build(m);
    const RewriteResult r = rewrite_to_fp8(*model, recipe_of(kind), at::kCPU);
    const std::string text = r.report.to_string();
    CHECK_THAT(text, FP8T_CONTAINS("h0.mlp.experts_fc"));
    CHECK_THAT(text, FP8T_CONTAINS("4x32x64"));  // groups x in x out
    int grouped = 0;
    for (const LayerDecision& d : r.report.layers) grouped += d.kind == "Grouped" ? 1 : 0;
    CHECK(grouped == 4);
    if (kind == RecipeKind::kBlock) {
      CHECK(r.report.converted_grouped == 0);
      CHECK_THAT(text, FP8T_CONTAINS("no grouped FP8 GEMM"));
      CHECK_THAT(text, FP8T_CONTAINS("delayed, current, rowwise"));
    } else {
      CHECK(r.report.converted_grouped == 4);
      // The experts (top-2 of 4: 2 x (2 x 32 x 32 + 32 x 32) MACs per token and block) weigh in the share.
      CHECK(r.report.fp8_gemm_share > 0.5);
      const at::Tensor loss = model->forward_loss(torch::randint(0, 64, {2, 8}), torch::randint(0, 64, {2, 8}));
      loss.backward();
      CHECK(std::isfinite(loss.item<double>()));
    }
  }
}
