// lib/fp8/layers/fp8_activation.*: the GELU fused into the FP8 casts of the Linears around it must
// change nothing but where the work happens.
#include "lib/fp8/layers/fp8_activation.h"

#include <torch/torch.h>  // torch::randint

#include <cmath>  // std::isnan

#include "lib/fp8/rewrite.h"   // rewrite_to_fp8
#include "lib/model/gpt.h"     // Gpt
#include "lib/util/memory.h"   // peak_memory_bytes, reset_peak_memory
#include "tests/catch.h"
#include "tests/fp8/twins_test_util.h"  // Twins, loss_and_backward, train_side_by_side

using namespace fp8t;

namespace {

ModelSection small_model(bool bias) {
  ModelSection m;
  m.vocab_size = 64;
  m.seq_len = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  m.bias = bias;
  return m;
}

// The twins of tests/fp8/twins_test_util.h with the model's own GELU put back in `plain`, so its
// Linears cast GELU's output and gradient themselves.
struct Twins : test::Twins {
  Twins(const ModelSection& cfg, const fp8::Recipe& recipe, const at::Device& device)
      : test::Twins(cfg, recipe, device, model::Activation::Kind::kGeluTanh) {}
};

// Trains `later` (c_proj's columnwise input cast in the backward, the default) and `kept` (cast
// in the forward and kept) side by side for 3 steps: losses, every gradient and the recipe state
// must agree bit for bit (the same cast of the same values with the same scale).
void expect_deferral_changes_nothing(const fp8::Recipe& recipe, const at::Device& device) {
  Twins t(small_model(false), recipe, device);
  for (auto& b : t.plain->blocks) {  // `plain` keeps its fused activation here, without deferral
    b->mlp->replace_slot("act", std::make_shared<fp8::Fp8Gelu>(std::static_pointer_cast<fp8::Fp8Linear>(b->dense_mlp()->c_fc),
                                                               std::static_pointer_cast<fp8::Fp8Linear>(b->dense_mlp()->c_proj)));
    auto act = std::dynamic_pointer_cast<fp8::Fp8Gelu>(b->dense_mlp()->act);
    REQUIRE(act != nullptr);
    act->set_defers_columnwise(false);
  }
  for (auto& b : t.fused->blocks) {
    auto act = std::dynamic_pointer_cast<fp8::Fp8Gelu>(b->dense_mlp()->act);
    REQUIRE_FALSE(act->defers_columnwise());  // off unless train.recompute is activation
    act->set_defers_columnwise(true);
  }
  test::train_side_by_side(t, device, /*recipe_state=*/false);
}

}  // namespace

TEST_CASE("fp8 gelu: the carrier is one broadcast NaN and owns no memory", "[fp8]") {
  const at::Tensor c = fp8::nan_carrier({4, 5, 6}, at::TensorOptions().dtype(at::kFloat));
  REQUIRE(c.sizes() == at::IntArrayRef({4, 5, 6}));
  REQUIRE(c.storage().nbytes() == sizeof(float));
  REQUIRE(c.isnan().all().item<bool>());
}

TEST_CASE("fp8 gelu: fused into the casts, the model computes bit for bit what the unfused one does (CPU)",
          "[fp8]") {
  const bool bias = GENERATE(true, false);
  // Overrides: the fused side must fall back exactly where a Linear reads high precision.
  const int override_case = GENERATE(0, 1, 2, 3);
  fp8::Recipe recipe;
  if (override_case == 1) recipe.override_linear_precision.fprop = true;
  if (override_case == 2) recipe.override_linear_precision.dgrad = true;
  if (override_case == 3) recipe.override_linear_precision.wgrad = true;
  INFO("bias " << bias << ", override case " << override_case);
  Twins t(small_model(bias), recipe, at::kCPU);
  REQUIRE(t.fused_rw.report.fused_activations == 2);
  REQUIRE(std::dynamic_pointer_cast<fp8::Fp8Gelu>(t.fused->blocks[0]->dense_mlp()->act) != nullptr);

  // The CPU backend's fused casts are the operator followed by the cast: exact equality.
  test::train_side_by_side(t, at::kCPU, /*recipe_state=*/true);
}

TEST_CASE("fp8 gelu: the hand-over happens only when the neighbour reads nothing but FP8", "[fp8]") {
  for (const bool fprop_override : {false, true}) {
    INFO("fprop override " << fprop_override);
    fp8::Recipe recipe;
    recipe.override_linear_precision.fprop = fprop_override;
    Twins t(small_model(false), recipe, at::kCPU);
    auto& mlp = *t.fused->blocks[0]->dense_mlp();
    const at::Tensor h = (torch::randn({2, 16, 128})).requires_grad_();
    const at::Tensor y = mlp.act->forward(h);
    if (fprop_override) {
      // c_proj's fprop reads high precision: the real GELU comes out.
      REQUIRE(at::allclose(y, at::gelu(h, "tanh")));
    } else {
      REQUIRE(y.stride(0) == 0);  // the carrier; c_proj takes the FP8 copy
      REQUIRE(y.isnan().all().item<bool>());
      REQUIRE_FALSE(mlp.c_proj->forward(y).isnan().any().item<bool>());
    }
  }
}

TEST_CASE("fp8 gelu: the rewrite defers c_proj's wgrad copy exactly under recompute activation and casts", "[fp8]") {
  for (const Recompute mode : {Recompute::kNone, Recompute::kActivation, Recompute::kCasts, Recompute::kAttention}) {
    INFO("recompute " << static_cast<int>(mode));
    const bool defers = mode == Recompute::kActivation || mode == Recompute::kCasts;  // casts: more copies too
    torch::manual_seed(3);
    model::Gpt gpt(small_model(false));
    gpt.set_recompute(mode);
    REQUIRE(gpt.recompute() == mode);
    const fp8::RewriteResult rw = fp8::rewrite_to_fp8(gpt, fp8::Recipe{}, at::kCPU);
    for (auto& b : gpt.blocks) {
      auto act = std::dynamic_pointer_cast<fp8::Fp8Gelu>(b->dense_mlp()->act);
      REQUIRE(act != nullptr);
      CHECK(act->defers_columnwise() == defers);
    }
    CHECK((rw.report.to_string().find("wgrad copy cast again in the backward") != std::string::npos) == defers);
  }
}

TEST_CASE("fp8 gelu: c_proj's wgrad operand cast in the backward changes no bit, every recipe (CPU)", "[fp8]") {
  for (const fp8::RecipeKind kind : {fp8::RecipeKind::kDelayed, fp8::RecipeKind::kCurrent, fp8::RecipeKind::kBlock}) {
    INFO("recipe " << fp8::to_string(kind));
    fp8::Recipe recipe;
    recipe.kind = kind;
    expect_deferral_changes_nothing(recipe, at::kCPU);
  }
}

#if defined(FP8T_WITH_CUDA)
TEST_CASE("fp8 gelu on CUDA: c_proj's wgrad operand cast in the backward changes no bit and holds less memory",
          "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  for (const fp8::RecipeKind kind : {fp8::RecipeKind::kDelayed, fp8::RecipeKind::kCurrent, fp8::RecipeKind::kBlock}) {
    INFO("recipe " << fp8::to_string(kind));
    fp8::Recipe recipe;
    recipe.kind = kind;
    expect_deferral_changes_nothing(recipe, gpu);
  }
  // The forward's peak (every saved tensor alive at the loss) drops by the columnwise copies:
  // 2 layers x [128, 48] FP8 codes (d_ff 128, 3 x 16 tokens) plus their scales.
  const ModelSection cfg = small_model(false);
  auto forward_peak = [&](bool defer) {
    Twins t(cfg, fp8::Recipe{}, gpu);
    for (auto& b : t.fused->blocks) std::dynamic_pointer_cast<fp8::Fp8Gelu>(b->dense_mlp()->act)->set_defers_columnwise(defer);
    const at::Tensor idx = torch::randint(0, 64, {3, 17}).to(gpu);
    torch::cuda::synchronize();
    reset_peak_memory(gpu);
    const at::Tensor loss = model::Gpt::loss(t.fused->forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
    torch::cuda::synchronize();
    const int64_t peak = peak_memory_bytes(gpu);
    loss.backward();
    return peak;
  };
  const int64_t kept = forward_peak(false), later = forward_peak(true);
  CAPTURE(kept, later);
  REQUIRE(kept - later >= 2 * 128 * 48);
}

TEST_CASE("fp8 gelu on CUDA: the fused kernels give the unfused model's loss and gradients", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  const bool bias = GENERATE(true, false);
  INFO("bias " << bias);
  Twins t(small_model(bias), fp8::Recipe{}, gpu);
  torch::manual_seed(4);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const at::Tensor idx = torch::randint(0, 64, {3, 17}).to(gpu);
    const at::Tensor lf = test::loss_and_backward(*t.fused, idx), lp = test::loss_and_backward(*t.plain, idx);
    // The kernels evaluate GELU and its derivative in FP32 with LibTorch's operation order, so
    // the FP8 codes equal the unfused casts' except where an FP32 rounding difference in tanh
    // flips a code: agreement to 1e-3 relative on the loss and on every gradient's norm.
    REQUIRE(lf.item<double>() == Approx(lp.item<double>()).epsilon(1e-3));
    const auto pp = t.plain->named_parameters();
    for (const auto& item : t.fused->named_parameters()) {
      INFO(item.key());
      const at::Tensor gf = item.value().grad().to(at::kDouble), gp = pp[item.key()].grad().to(at::kDouble);
      REQUIRE(((gf - gp).norm() / gp.norm().clamp_min(1e-30)).item<double>() < 1e-3);
    }
    t.fused_rw.scaling->update();
    t.plain_rw.scaling->update();
    t.fused->zero_grad();
    t.plain->zero_grad();
  }
}
#endif
