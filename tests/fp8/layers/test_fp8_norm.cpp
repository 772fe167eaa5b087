// lib/fp8/layers/fp8_norm.* on the CPU emulation backend: the FP8 norm must compute what the plain
// model::Norm computes, hand the following Fp8Linear exactly the codes that Linear would cast
// itself, and give the plain norm's gradients.
#include "lib/fp8/layers/fp8_norm.h"

#include <torch/torch.h>  // torch::randn

#include "lib/fp8/recipes/scaling.h"  // make_scaling
#include "lib/fp8/layers/fp8_linear.h"        // Fp8Linear
#include "lib/model/layers.h"                 // model::Norm, model::Linear
#include "tests/catch.h"

using namespace fp8t;
using fp8t::model::Norm;

namespace {

constexpr int64_t kDim = 48;
constexpr int64_t kOut = 32;

// A norm feeding one Fp8Linear (under the recipe's scaling: delayed by default), twice from one seed: `fp8` converts the norm to an Fp8Norm that
// hands its output over in FP8, `plain` keeps the model's norm and lets its Linear cast the input.
struct NormThenLinear {
  std::shared_ptr<fp8::Scaling> scaling;
  std::shared_ptr<model::UnaryModule> norm;
  std::shared_ptr<fp8::Fp8Linear> linear;

  NormThenLinear(Norm::Kind kind, bool bias, const fp8::Recipe& recipe, bool convert) {
    torch::manual_seed(5);
    auto src_norm = std::make_shared<Norm>(kind, kDim, 1e-5, bias);
    {
      torch::NoGradGuard no_grad;
      src_norm->weight.uniform_(0.5, 1.5);  // not all ones: gamma must really be applied
      if (src_norm->bias.defined()) src_norm->bias.normal_(0.0, 0.2);
    }
    model::Linear src_linear(kDim, kOut, /*bias=*/true);
    scaling = fp8::make_scaling(recipe);
    linear = std::make_shared<fp8::Fp8Linear>(src_linear, "fc", scaling);
    norm = convert ? std::shared_ptr<model::UnaryModule>(std::make_shared<fp8::Fp8Norm>(*src_norm, linear))
                   : std::shared_ptr<model::UnaryModule>(src_norm);
    scaling->finalize(at::kCPU);
  }

  at::Tensor forward(const at::Tensor& x) { return linear->forward(norm->forward(x)); }
};

at::Tensor input(uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randn({3, 7, kDim}) * 3.0 + 0.5).requires_grad_();
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || at::equal(a, b));
}

}  // namespace

TEST_CASE("fp8 norm: a Linear fed by it computes exactly what it computes from the plain norm, gradients too",
          "[fp8]") {
  const Norm::Kind kind = GENERATE(Norm::Kind::kLayerNorm, Norm::Kind::kRMSNorm);
  const bool bias = GENERATE(true, false);
  const bool rms = kind == Norm::Kind::kRMSNorm;
  INFO((rms ? "RMSNorm" : "LayerNorm") << ", bias " << bias);
  NormThenLinear fp8(kind, bias, fp8::Recipe{}, /*convert=*/true);
  NormThenLinear plain(kind, bias, fp8::Recipe{}, /*convert=*/false);
  REQUIRE(std::dynamic_pointer_cast<fp8::Fp8Norm>(fp8.norm) != nullptr);

  for (int step = 0; step < 3; ++step) {  // from step 1 on the casts use real (non-unit) scales
    INFO("step " << step);
    const at::Tensor x1 = input(10 + step), x2 = input(10 + step);
    const at::Tensor dy = torch::randn({3, 7, kOut});
    const at::Tensor y1 = fp8.forward(x1), y2 = plain.forward(x2);
    // Forward: the handed-over codes are the codes of a cast of the plain norm's output (exact).
    REQUIRE(at::equal(y1, y2));
    REQUIRE(at::equal(fp8.scaling->amax_history(), plain.scaling->amax_history()));
    y1.backward(dy);
    y2.backward(dy);
    REQUIRE(at::equal(fp8.linear->weight.grad(), plain.linear->weight.grad()));
    const auto& n1 = dynamic_cast<fp8::Fp8Norm&>(*fp8.norm);
    const auto& n2 = dynamic_cast<Norm&>(*plain.norm);
    if (!rms) {
      // LayerNorm: both backwards are ATen's native_layer_norm_backward in FP32: exact.
      REQUIRE(at::equal(x1.grad(), x2.grad()));
      REQUIRE(at::equal(n1.weight.grad(), n2.weight.grad()));
      REQUIRE(same(n1.bias.defined() ? n1.bias.grad() : at::Tensor(), n2.bias.defined() ? n2.bias.grad() : at::Tensor()));
    } else {
      // RMSNorm: the backend's closed-form gradient vs autograd through rsqrt/mean/pow; the two
      // differ only by FP32 rounding order (a few ulp of values of order 1), so 1e-5 relative.
      REQUIRE(at::allclose(x1.grad(), x2.grad(), 1e-5, 1e-6));
      REQUIRE(at::allclose(n1.weight.grad(), n2.weight.grad(), 1e-5, 1e-6));
    }
    fp8.scaling->update();
    plain.scaling->update();
    for (auto* m : {&fp8, &plain}) {
      m->norm->zero_grad();
      m->linear->zero_grad();
    }
  }
  REQUIRE(fp8.scaling->scale().ne(1.0).any().item<bool>());  // real scales were in use
}

TEST_CASE("fp8 norm: the output is a carrier only when the consumer reads nothing but FP8", "[fp8]") {
  const Norm::Kind kind = GENERATE(Norm::Kind::kLayerNorm, Norm::Kind::kRMSNorm);
  INFO((kind == Norm::Kind::kRMSNorm ? "RMSNorm" : "LayerNorm"));
  for (const int override_case : {0, 1, 2}) {
    INFO("override case " << override_case);
    fp8::Recipe recipe;
    if (override_case == 1) recipe.override_linear_precision.fprop = true;  // fprop reads y
    if (override_case == 2) recipe.stats = true;  // the statistics read y
    NormThenLinear fp8(kind, true, recipe, /*convert=*/true);
    NormThenLinear plain(kind, true, recipe, /*convert=*/false);
    fp8.scaling->set_collect_stats(recipe.stats);
    const at::Tensor x = input(3);
    const at::Tensor y = fp8.norm->forward(x);
    const at::Tensor y_ref = plain.norm->forward(x);
    const int slot = fp8.linear->slot_input();
    if (override_case == 0) {
      REQUIRE(y.stride(0) == 0);  // one broadcast NaN: no memory, never read
      REQUIRE(y.isnan().all().item<bool>());
    } else {
      REQUIRE(at::equal(y, y_ref));  // the real output, as the plain norm computes it
    }
    // Either way the norm recorded max|y| into the consumer's input slot before the Linear ran.
    REQUIRE(fp8.scaling->amax_history()[0][slot].item<float>() == y_ref.abs().max().item<float>());
    const at::Tensor out = fp8.linear->forward(y);
    REQUIRE_FALSE(out.isnan().any().item<bool>());
    REQUIRE(at::equal(out, plain.linear->forward(y_ref)));
  }
}

TEST_CASE("fp8 norm: evaluation records no amax and hands over the FP8 input", "[fp8]") {
  NormThenLinear fp8(Norm::Kind::kLayerNorm, true, fp8::Recipe{}, /*convert=*/true);
  NormThenLinear plain(Norm::Kind::kLayerNorm, true, fp8::Recipe{}, /*convert=*/false);
  fp8.norm->eval();
  fp8.linear->eval();
  plain.norm->eval();
  plain.linear->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = input(4);
  REQUIRE(at::equal(fp8.forward(x), plain.forward(x)));
  REQUIRE(fp8.scaling->amax_history().eq(0).all().item<bool>());
}

TEST_CASE("fp8 norm: forward_add is x + h and then the norm, bit for bit, gradients of x, h and the parameters too",
          "[fp8]") {
  // The fused node (one Backend::add_norm_forward / add_norm_backward) against an ATen add and the
  // plain FP8 norm node: the same FP32 sum, the same norm, and r's two gradient terms summed once.
  const Norm::Kind kind = GENERATE(Norm::Kind::kLayerNorm, Norm::Kind::kRMSNorm);
  const bool r_used = GENERATE(true, false);  // r's other use: a gradient arrives at r, or none does
  INFO((kind == Norm::Kind::kRMSNorm ? "RMSNorm" : "LayerNorm") << ", r used after the norm: " << r_used);
  NormThenLinear fused(kind, true, fp8::Recipe{}, /*convert=*/true);
  NormThenLinear unfused(kind, true, fp8::Recipe{}, /*convert=*/true);
  auto& fused_norm = dynamic_cast<fp8::Fp8Norm&>(*fused.norm);
  auto& unfused_norm = dynamic_cast<fp8::Fp8Norm&>(*unfused.norm);
  for (int step = 0; step < 3; ++step) {  // from step 1 on the casts use real (non-unit) scales
    INFO("step " << step);
    const at::Tensor x1 = input(20 + step), x2 = input(20 + step);
    const at::Tensor h1 = input(40 + step), h2 = input(40 + step);
    const at::Tensor dy = torch::randn({3, 7, kOut}), dr = torch::randn({3, 7, kDim});
    const model::AddNormOutput o = fused_norm.forward_add(x1, h1);
    const at::Tensor r2 = x2 + h2;
    const at::Tensor y1 = fused.linear->forward(o.y), y2 = unfused.linear->forward(unfused_norm.forward(r2));
    REQUIRE(at::equal(o.sum, r2));
    REQUIRE(at::equal(y1, y2));
    REQUIRE(at::equal(fused.scaling->amax_history(), unfused.scaling->amax_history()));
    if (r_used) {
      torch::autograd::backward({y1, o.sum}, {dy, dr});
      torch::autograd::backward({y2, r2}, {dy, dr});
    } else {
      y1.backward(dy);
      y2.backward(dy);
    }
    REQUIRE(at::equal(x1.grad(), x2.grad()));
    REQUIRE(at::equal(h1.grad(), h2.grad()));
    REQUIRE(at::equal(fused_norm.weight.grad(), unfused_norm.weight.grad()));
    if (kind == Norm::Kind::kLayerNorm) REQUIRE(at::equal(fused_norm.bias.grad(), unfused_norm.bias.grad()));
    REQUIRE(at::equal(fused.linear->weight.grad(), unfused.linear->weight.grad()));
    fused.scaling->update();
    unfused.scaling->update();
    for (auto* m : {&fused, &unfused}) {
      m->norm->zero_grad();
      m->linear->zero_grad();
    }
  }
}

TEST_CASE("fp8 norm under current scaling: two passes (amax, then the cast) give the Linear exactly what it casts "
          "from the plain norm, with forward_add too",
          "[fp8]") {
  // Nothing reads y here (the consumer takes FP8 only): the norm runs once for the amax without
  // writing y, then again over its stored input with the cast in the kernel. The plain side casts
  // the plain norm's output in the Linear (an amax pass, then the cast).
  const Norm::Kind kind = GENERATE(Norm::Kind::kLayerNorm, Norm::Kind::kRMSNorm);
  const bool add = GENERATE(false, true);
  INFO((kind == Norm::Kind::kRMSNorm ? "RMSNorm" : "LayerNorm") << ", fused add " << add);
  fp8::Recipe recipe;
  recipe.kind = fp8::RecipeKind::kCurrent;
  NormThenLinear fp8(kind, true, recipe, /*convert=*/true);
  NormThenLinear plain(kind, true, recipe, /*convert=*/false);
  auto& norm = dynamic_cast<fp8::Fp8Norm&>(*fp8.norm);
  const int slot = fp8.linear->slot_input();
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const at::Tensor x1 = input(50 + step), x2 = input(50 + step);
    const at::Tensor h1 = input(60 + step), h2 = input(60 + step);
    const at::Tensor dy = torch::randn({3, 7, kOut});
    const at::Tensor y = add ? norm.forward_add(x1, h1).y : norm.forward(x1);
    REQUIRE(y.stride(0) == 0);  // a carrier: y itself was never made
    const at::Tensor y_ref = plain.norm->forward(add ? x2 + h2 : x2);
    const at::Tensor out1 = fp8.linear->forward(y), out2 = plain.linear->forward(y_ref);
    REQUIRE(fp8.scaling->amax_history()[0][slot].item<float>() == y_ref.abs().max().item<float>());
    REQUIRE(at::equal(fp8.scaling->scale(), plain.scaling->scale()));
    REQUIRE(at::equal(out1, out2));
    out1.backward(dy);
    out2.backward(dy);
    REQUIRE(at::equal(fp8.linear->weight.grad(), plain.linear->weight.grad()));
    REQUIRE(at::allclose(x1.grad(), x2.grad(), 1e-5, 1e-6));  // the closed-form RMSNorm backward: see above
    for (auto* m : {&fp8, &plain}) {
      m->norm->zero_grad();
      m->linear->zero_grad();
    }
  }
}

