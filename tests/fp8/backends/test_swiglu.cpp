// The SwiGLU of a LLaMA-shaped model fused into the FP8 casts (lib/fp8/layers/fp8_activation.*, the
// backends. Backend::quantize of the SwiGLU sources): it must change nothing but where the work
// happens. CPU: the fused model equals the unfused one bit for bit; GPU: the fused kernels equal
// the CPU emulation bit for bit.
#include <torch/torch.h>  // torch::randint

#include <cmath>    // std::ldexp
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/fp8/backends/backend.h"       // backend_for, CastSource
#include "lib/fp8/layers/fp8_activation.h"  // Fp8Swiglu
#include "lib/fp8/rewrite.h"                // rewrite_to_fp8
#include "lib/model/gpt.h"                  // Gpt
#include "tests/catch.h"
#include "tests/fp8/twins_test_util.h"     // Twins, loss_and_backward, train_side_by_side
#include "tests/fp8/swiglu_test_util.h"     // unfused_swiglu, unfused_swiglu_backward, bit_diff

using namespace fp8t;

namespace {

// A tiny LLaMA: RMSNorm, SwiGLU (c_fc 32 -> 2 x 64), RoPE, grouped-query attention.
ModelSection tiny_llama(bool bias) {
  ModelSection m;
  m.vocab_size = 64;
  m.seq_len = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_kv_head = 1;
  m.d_model = 32;
  m.d_ff = 64;
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.position = PositionKind::kRope;
  m.bias = bias;
  return m;
}

// The twins of tests/fp8/twins_test_util.h with the model's own SwiGLU put back in `plain`, so its
// Linears cast the activation's output and gradient themselves.
struct Twins : test::Twins {
  Twins(const ModelSection& cfg, const fp8::Recipe& recipe, const at::Device& device)
      : test::Twins(cfg, recipe, device, model::Activation::Kind::kSwiGLU) {}
};

// The rewrite report's line for the last block's activation names SwiGLU and both casts it went into.
void require_report_lists_fused_swiglu(const std::string& report) {
  const size_t pos = report.find("  h1.mlp.act ");
  REQUIRE(pos != std::string::npos);
  const std::string line = report.substr(pos, report.find('\n', pos) - pos);
  INFO(line);
  REQUIRE(line.find(" SwiGLU ") != std::string::npos);
  REQUIRE(line.find("fp8: fused into h1.mlp.c_proj's input cast and h1.mlp.c_fc's gradient cast") != std::string::npos);
}

}  // namespace

TEST_CASE("fp8 swiglu: fused into the casts, a LLaMA-shaped model computes bit for bit what the unfused one "
          "does (CPU: loss, every gradient, amax history, 3 steps)",
          "[fp8]") {
  const bool bias = GENERATE(false, true);
  // Overrides: the fused side must fall back exactly where a Linear reads high precision.
  const int override_case = GENERATE(0, 1, 2, 3);
  const fp8::RecipeKind kind = GENERATE(fp8::RecipeKind::kDelayed, fp8::RecipeKind::kCurrent);
  fp8::Recipe recipe;
  recipe.kind = kind;
  if (override_case == 1) recipe.override_linear_precision.fprop = true;
  if (override_case == 2) recipe.override_linear_precision.dgrad = true;
  if (override_case == 3) recipe.override_linear_precision.wgrad = true;
  INFO("recipe " << fp8::to_string(kind) << ", bias " << bias << ", override case " << override_case);
  Twins t(tiny_llama(bias), recipe, at::kCPU);
  REQUIRE(t.fused_rw.report.fused_activations == 2);
  require_report_lists_fused_swiglu(t.fused_rw.report.to_string());
  const auto act = std::dynamic_pointer_cast<fp8::Fp8Swiglu>(t.fused->blocks[0]->dense_mlp()->act);
  REQUIRE(act != nullptr);
  REQUIRE(act->kind() == model::Activation::Kind::kSwiGLU);

  // The CPU backend's fused casts are the unfused LibTorch composition followed by the cast.
  test::train_side_by_side(t, at::kCPU, /*recipe_state=*/true);
}

TEST_CASE("fp8 swiglu: the hand-over happens only when the neighbour reads nothing but FP8", "[fp8]") {
  for (const bool fprop_override : {false, true}) {
    INFO("fprop override " << fprop_override);
    fp8::Recipe recipe;
    recipe.override_linear_precision.fprop = fprop_override;
    Twins t(tiny_llama(false), recipe, at::kCPU);
    auto& mlp = *t.fused->blocks[0]->dense_mlp();
    const at::Tensor h = torch::randn({2, 16, 128}).requires_grad_();
    const at::Tensor y = mlp.act->forward(h);
    REQUIRE(y.sizes() == at::IntArrayRef({2, 16, 64}));
    if (fprop_override) {
      // c_proj's fprop reads high precision: the real SwiGLU comes out.
      REQUIRE(at::equal(y, test::unfused_swiglu(h)));
    } else {
      REQUIRE(y.stride(0) == 0);  // the carrier; c_proj takes the FP8 copy
      REQUIRE(y.isnan().all().item<bool>());
      REQUIRE_FALSE(mlp.c_proj->forward(y).isnan().any().item<bool>());
    }
  }
}

TEST_CASE("fp8 swiglu: c_proj's wgrad copy written by c_fc's gradient cast gives the bits of keeping it (CPU, 3 "
          "steps)",
          "[fp8]") {
  const fp8::RecipeKind kind = GENERATE(fp8::RecipeKind::kDelayed, fp8::RecipeKind::kCurrent);
  const bool bias = GENERATE(false, true);
  INFO("recipe " << fp8::to_string(kind) << ", bias " << bias);
  fp8::Recipe recipe;
  recipe.kind = kind;
  Twins t(tiny_llama(bias), recipe, at::kCPU);  // `plain` gets its fused activation back, copy kept
  const std::string report = t.fused_rw.report.to_string();
  INFO(report);
  REQUIRE(report.find("h1.mlp.c_proj's wgrad copy written by the gradient cast") != std::string::npos);
  for (size_t i = 0; i < t.fused->blocks.size(); ++i) {
    auto on = std::dynamic_pointer_cast<fp8::Fp8Swiglu>(t.fused->blocks[i]->dense_mlp()->act);
    REQUIRE(on != nullptr);
    REQUIRE(on->value_copy_from_gradient_cast());  // the rewrite's default for per-tensor recipes
    auto& mlp = *t.plain->blocks[i]->dense_mlp();
    auto off = std::make_shared<fp8::Fp8Swiglu>(std::static_pointer_cast<fp8::Fp8Linear>(mlp.c_fc),
                                                std::static_pointer_cast<fp8::Fp8Linear>(mlp.c_proj));
    REQUIRE_FALSE(off->value_copy_from_gradient_cast());
    mlp.replace_slot("act", off);
  }
  test::train_side_by_side(t, at::kCPU, /*recipe_state=*/true);
  // Where the work happened: c_fc's gradient arrives cast by c_proj's backward (before the
  // activation's node runs, which is when the hook on the activation's output fires).
  for (auto* model : {t.fused.get(), t.plain.get()}) {
    auto& mlp = *model->blocks[0]->dense_mlp();
    const auto c_fc = std::static_pointer_cast<fp8::Fp8Linear>(mlp.c_fc);
    const at::Tensor x = torch::randn({3, 16, 32}).requires_grad_();
    const at::Tensor y = mlp.act->forward(mlp.c_fc->forward(x));
    bool cast_by_c_proj = false;
    y.register_hook([&](const at::Tensor& g) {
      cast_by_c_proj = c_fc->grad_state()->cast_by_consumer.carrier.defined();
      return g;
    });
    mlp.c_proj->forward(y).sum().backward();
    CHECK(cast_by_c_proj == (model == t.fused.get()));
    CHECK_FALSE(c_fc->grad_state()->cast_by_consumer.carrier.defined());  // handed on, not left behind
    REQUIRE(x.grad().defined());
  }
}

TEST_CASE("fp8 swiglu: block scaling and fp8.swiglu_wgrad_copy forward keep c_proj's wgrad copy from the forward",
          "[fp8]") {
  const bool block = GENERATE(true, false);
  fp8::Recipe recipe;
  recipe.kind = block ? fp8::RecipeKind::kBlock : fp8::RecipeKind::kDelayed;
  if (!block) recipe.swiglu_wgrad_copy = fp8::SwigluWgradCopy::kForward;
  INFO("recipe " << fp8::to_string(recipe.kind) << ", fp8.swiglu_wgrad_copy " << fp8::to_string(recipe.swiglu_wgrad_copy));
  torch::manual_seed(3);
  model::Gpt gpt(tiny_llama(false));
  const fp8::RewriteResult rw = fp8::rewrite_to_fp8(gpt, recipe, at::kCPU);
  for (auto& b : gpt.blocks) {
    auto act = std::dynamic_pointer_cast<fp8::Fp8Swiglu>(b->dense_mlp()->act);
    REQUIRE(act != nullptr);
    CHECK_FALSE(act->value_copy_from_gradient_cast());
  }
  CHECK(rw.report.to_string().find("written by the gradient cast") == std::string::npos);
}

TEST_CASE("fp8 swiglu: the CPU emulation's value is the unfused LibTorch composition", "[fp8]") {
  at::manual_seed(5);
  const at::Tensor h = at::randn({24, 128}) * 3.0, dy = at::randn({24, 64});
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const at::Tensor hd = h.to(dt);
    REQUIRE(at::equal(fp8::materialize(fp8::CastSource::swiglu(hd)), test::unfused_swiglu(hd)));
    // Autograd's gradient, op for op: MulBackward, SiluBackward, the concatenation of the halves.
    REQUIRE(at::equal(fp8::materialize(fp8::CastSource::dswiglu(dy.to(dt), hd)), test::unfused_swiglu_backward(dy, hd)));
  }
}

#if defined(FP8T_WITH_CUDA)
namespace {

fp8::SlotRef slot_on(const at::Device& device, float scale, fp8::Format format) {
  fp8::SlotRef s;
  s.scale = at::full({}, scale, at::TensorOptions().dtype(at::kFloat).device(device));
  s.amax = at::full({}, 0.25f, at::TensorOptions().dtype(at::kFloat).device(device));
  s.format = format;
  return s;
}

void require_same(const fp8::Fp8Tensor& gpu, const fp8::Fp8Tensor& cpu) {
  REQUIRE(at::equal(gpu.rowwise.codes.cpu(), cpu.rowwise.codes));
  REQUIRE(at::equal(gpu.columnwise.codes.cpu(), cpu.columnwise.codes));
  REQUIRE(at::equal(gpu.rowwise.scale_inv.cpu(), cpu.rowwise.scale_inv));
}

// The gradient cast with the value companion (bf16: one kernel; fp32: the two casts in turn):
// the gradient's codes, scale_inv and amax, and the value's columnwise codes and scale_inv, equal
// the CPU emulation's, and the value's codes are those of the value's own columnwise cast.
void require_value_companion_matches(fp8::Backend& cuda, fp8::Backend& cpu, const at::Tensor& dy,
                                     const at::Tensor& h, const at::Device& gpu) {
  fp8::SlotRef g_c = slot_on(at::kCPU, 1024.0f, fp8::Format::kE5M2), g_g = slot_on(gpu, 1024.0f, fp8::Format::kE5M2);
  fp8::SlotRef v_c = slot_on(at::kCPU, 16.0f, fp8::Format::kE4M3), v_g = slot_on(gpu, 16.0f, fp8::Format::kE4M3);
  fp8::Fp8Operand col_c, col_g;
  const fp8::Fp8Tensor gc = cpu.quantize(fp8::CastSource::dswiglu(dy, h), g_c, {true, true, nullptr, {v_c, &col_c}});
  const fp8::Fp8Tensor gg =
      cuda.quantize(fp8::CastSource::dswiglu(dy.to(gpu), h.to(gpu)), g_g, {true, true, nullptr, {v_g, &col_g}});
  require_same(gg, gc);
  REQUIRE(at::equal(g_g.amax.cpu(), g_c.amax));
  REQUIRE(at::equal(v_g.amax.cpu(), v_c.amax));  // the value's slot records nothing
  REQUIRE(v_c.amax.item<float>() == 0.25f);
  REQUIRE(at::equal(col_g.codes.cpu(), col_c.codes));
  REQUIRE(at::equal(col_g.scale_inv.cpu(), col_c.scale_inv));
  REQUIRE(col_g.format == fp8::Format::kE4M3);
  fp8::SlotRef alone = slot_on(at::kCPU, 16.0f, fp8::Format::kE4M3);
  REQUIRE(at::equal(col_c.codes, cpu.quantize(fp8::CastSource::swiglu(h), alone, {false, true}).columnwise.codes));
}

}  // namespace

TEST_CASE("fp8 swiglu on CUDA: the backend's fused casts equal the CPU emulation's bit for bit", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  INFO("ATen CPU capability " << at::get_cpu_capability() << " (the CPU emulation's silu must be vectorised)");
  REQUIRE(test::aten_cpu_uses_vector_exp());
  const at::Device gpu(at::kCUDA, 0);
  fp8::Backend& cuda = fp8::backend_for(gpu);
  fp8::Backend& cpu = fp8::backend_for(at::kCPU);
  // F a multiple of 64 and rows * F <= 16384: ATen's CPU silu runs whole vectors on one thread.
  for (const auto& [rows, f] : std::vector<std::pair<int64_t, int64_t>>{{48, 64}, {200, 64}, {96, 128}}) {
    for (at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
      CAPTURE(rows, f, c10::toString(dt));
      at::manual_seed(rows + f);
      const at::Tensor h = (at::randn({rows, 2 * f}) * 3.0).to(dt);
      const at::Tensor dy = (at::randn({rows, f}) * at::pow(2.0, at::randint(-8, 8, {rows, f}))).to(dt);
      fp8::SlotRef in_c = slot_on(at::kCPU, 8.0f, fp8::Format::kE4M3), in_g = slot_on(gpu, 8.0f, fp8::Format::kE4M3);
      require_same(cuda.quantize(fp8::CastSource::swiglu(h.to(gpu)), in_g, {true, true}),
                   cpu.quantize(fp8::CastSource::swiglu(h), in_c, {true, true}));
      REQUIRE(at::equal(in_g.amax.cpu(), in_c.amax));

      fp8::SlotRef g_c = slot_on(at::kCPU, 2048.0f, fp8::Format::kE5M2), g_g = slot_on(gpu, 2048.0f, fp8::Format::kE5M2);
      at::Tensor dbias_c, dbias_g;
      require_same(cuda.quantize(fp8::CastSource::dswiglu(dy.to(gpu), h.to(gpu)), g_g, {true, true, &dbias_g}),
                   cpu.quantize(fp8::CastSource::dswiglu(dy, h), g_c, {true, true, &dbias_c}));
      REQUIRE(at::equal(g_g.amax.cpu(), g_c.amax));
      // dbias: the GPU's fixed tile order (equal to its unfused gradient cast's) vs ATen's CPU sum:
      // within the FP32 summation bound (64 + ceil(rows / 64) sequential terms).
      const at::Tensor dh = fp8::materialize(fp8::CastSource::dswiglu(dy, h)).to(at::kDouble);
      const at::Tensor bound = dh.abs().sum(0) * ((64.0 + (rows + 63) / 64) * std::ldexp(1.0, -24)) + 1e-30;
      REQUIRE(((dbias_g.cpu().to(at::kDouble) - dbias_c.to(at::kDouble)).abs() <= 2.0 * bound).all().item<bool>());
      require_value_companion_matches(cuda, cpu, dy, h, gpu);
    }
  }
}

TEST_CASE("fp8 swiglu on CUDA: the fused model agrees with the unfused one", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  const bool bias = GENERATE(false, true);
  const fp8::RecipeKind kind = GENERATE(fp8::RecipeKind::kDelayed, fp8::RecipeKind::kCurrent);
  INFO("recipe " << fp8::to_string(kind) << ", bias " << bias);
  fp8::Recipe recipe;
  recipe.kind = kind;
  Twins t(tiny_llama(bias), recipe, gpu);
  REQUIRE(t.fused_rw.report.fused_activations == 2);
  torch::manual_seed(4);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const at::Tensor idx = torch::randint(0, 64, {3, 17}).to(gpu);
    const at::Tensor lf = test::loss_and_backward(*t.fused, idx), lp = test::loss_and_backward(*t.plain, idx);
    // The kernels evaluate ATen's CPU silu (its vectorised exp); ATen's CUDA silu uses CUDA's expf,
    // which rounds differently in rare FP32 ulps and can flip a code: agreement to 1e-3 relative on
    // the loss and on every gradient's norm, as for GELU.
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
#endif  // FP8T_WITH_CUDA
