// lib/fp8/layers/fp8_linear.* on the CPU emulation backend.
#include "lib/fp8/layers/fp8_linear.h"

#include <torch/torch.h>  // torch::randn

#include "lib/fp8/backends/cpu_backend.h"   // decode_codes
#include "lib/numerics/format.h"            // encode
#include "lib/fp8/layers/fp8_activation.h"  // Fp8Gelu
#include "lib/fp8/recipes/scaling.h"        // make_scaling
#include "tests/catch.h"
#include "tests/tensor_compare.h"  // test::rel_err

using namespace fp8t::fp8;

using fp8t::test::rel_err;

namespace {

// x -> dequantized FP8 values of fp8(x * scale) in float64 (the reference quantization).
at::Tensor fake_quant64(const at::Tensor& x, float scale, Format f) {
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor codes = at::empty(xf.sizes(), at::kByte);
  for (int64_t i = 0; i < xf.numel(); ++i) codes.data_ptr<uint8_t>()[i] = encode(xf.data_ptr<float>()[i] * scale, f);
  return decode_codes(codes, f).to(at::kDouble) / static_cast<double>(scale);
}

struct Fixture {
  std::shared_ptr<DelayedScaling> scaling;
  std::shared_ptr<Fp8Linear> layer;
  explicit Fixture(Recipe r, int64_t in = 64, int64_t out = 48, bool bias = true) {
    torch::manual_seed(7);
    fp8t::model::Linear src(in, out, bias);
    {
      torch::NoGradGuard g;
      if (bias) src.bias.normal_(0.0, 0.1);
    }
    scaling = std::make_shared<DelayedScaling>(r);
    layer = std::make_shared<Fp8Linear>(src, "fc", scaling);
    scaling->finalize(at::kCPU);
  }
  // One forward+backward so every slot gets a real (non-unit) scale.
  void warm_up(const at::Tensor& x, const at::Tensor& dy) {
    layer->forward(x.detach().requires_grad_()).backward(dy);
    scaling->update();
    layer->zero_grad();
  }
};

}  // namespace

TEST_CASE("fp8 linear: amax of input, weight and grad_output recorded by the casts", "[fp8]") {
  Fixture f(Recipe{});
  const at::Tensor x = torch::randn({32, 64}).requires_grad_();
  const at::Tensor dy = torch::randn({32, 48}) * 1e-3;
  f.layer->forward(x).backward(dy);
  const at::Tensor h0 = f.scaling->amax_history()[0];
  REQUIRE(h0[f.layer->slot_input()].item<float>() == x.abs().max().item<float>());
  REQUIRE(h0[f.layer->slot_weight()].item<float>() == f.layer->weight.abs().max().item<float>());
  REQUIRE(h0[f.layer->slot_grad_output()].item<float>() == dy.abs().max().item<float>());
  REQUIRE(f.scaling->slot_format(f.layer->slot_grad_output()) == Format::kE5M2);  // HYBRID
}

TEST_CASE("fp8 linear: forward and backward match a float64 reference of the same quantization", "[fp8]") {
  for (auto fmt : {RecipeFormat::kHybrid, RecipeFormat::kE4M3}) {
    Recipe r;
    r.fp8_format = fmt;
    Fixture f(r);
    const at::Tensor x = torch::randn({40, 64}) * 3.0;
    const at::Tensor dy = torch::randn({40, 48}) * 1e-2;
    f.warm_up(x, dy);

    const at::Tensor xin = x.clone().requires_grad_();
    const at::Tensor y = f.layer->forward(xin);
    y.backward(dy);

    const auto sc = f.scaling->scale();
    const float sx = sc[f.layer->slot_input()].item<float>(), sw = sc[f.layer->slot_weight()].item<float>();
    const float sg = sc[f.layer->slot_grad_output()].item<float>();
    REQUIRE(sx != 1.0f);  // the warm-up produced real scales
    const Format gfmt = r.backward_format();
    const at::Tensor qx = fake_quant64(x, sx, Format::kE4M3), qw = fake_quant64(f.layer->weight.detach(), sw, Format::kE4M3);
    const at::Tensor qdy = fake_quant64(dy, sg, gfmt);
    const at::Tensor y_ref = qx.mm(qw.t()) + f.layer->bias.detach().to(at::kDouble);
    // FP8 products are exact in FP32 and K = 64 sums round at ~2^-24 each: 1e-5 leaves room
    // for the accumulation order while catching any wrong code or scale (>= 2^-4 relative).
    REQUIRE(rel_err(y, y_ref) < 1e-5);
    REQUIRE(rel_err(xin.grad(), qdy.mm(qw)) < 1e-5);
    REQUIRE(rel_err(f.layer->weight.grad(), qdy.t().mm(qx)) < 1e-5);
    REQUIRE(rel_err(f.layer->bias.grad(), dy.to(at::kDouble).sum(0)) < 1e-6);  // dbias: plain FP32 sum

    // Against the unquantized layer: E4M3 keeps 3 mantissa bits (relative step 2^-4 per
    // element, ~2^-5 rms); E5M2 gradients 2 bits. Products of two quantized operands stay
    // within ~10% Frobenius error on Gaussian data.
    const at::Tensor x64 = x.to(at::kDouble), w64 = f.layer->weight.detach().to(at::kDouble);
    REQUIRE(rel_err(y, x64.mm(w64.t()) + f.layer->bias.detach().to(at::kDouble)) < 0.1);
    REQUIRE(rel_err(xin.grad(), dy.to(at::kDouble).mm(w64)) < 0.15);
    REQUIRE(rel_err(f.layer->weight.grad(), dy.to(at::kDouble).t().mm(x64)) < 0.15);
  }
}

TEST_CASE("fp8 linear: each override flag routes exactly its GEMM to high precision", "[fp8]") {
  const at::Tensor x = torch::randn({24, 64});
  const at::Tensor dy = torch::randn({24, 48}) * 1e-2;
  for (int which = 0; which < 3; ++which) {
    Recipe r;
    r.override_linear_precision = {which == 0, which == 1, which == 2};
    Fixture f(r);
    f.warm_up(x, dy);
    const at::Tensor xin = x.clone().requires_grad_();
    const at::Tensor y = f.layer->forward(xin);
    y.backward(dy);
    const at::Tensor W = f.layer->weight.detach();
    const bool y_hp = at::allclose(y, at::linear(x, W, f.layer->bias.detach()), 0.0, 1e-6);
    const bool dx_hp = at::allclose(xin.grad(), dy.mm(W), 0.0, 1e-6);
    const bool dw_hp = at::allclose(f.layer->weight.grad(), dy.t().mm(x), 0.0, 1e-6);
    INFO("override index " << which);
    REQUIRE(y_hp == (which == 0));
    REQUIRE(dx_hp == (which == 1));
    REQUIRE(dw_hp == (which == 2));
  }
}

TEST_CASE("fp8 linear: the weight is cast once per step and re-cast after an update", "[fp8]") {
  Fixture f(Recipe{});
  const at::Tensor x = torch::randn({8, 64});
  f.layer->forward(x.requires_grad_()).sum().backward();
  const at::Tensor codes1 = f.layer->weight_fp8(true, true, true).rowwise.codes;
  f.layer->forward(x).sum().backward();  // second micro-batch of the same step
  REQUIRE(f.layer->weight_fp8(true, true, true).rowwise.codes.data_ptr() == codes1.data_ptr());
  f.scaling->update();  // new scales
  f.layer->forward(x).sum().backward();
  REQUIRE(f.layer->weight_fp8(true, true, true).rowwise.codes.data_ptr() != codes1.data_ptr());
  const at::Tensor codes2 = f.layer->weight_fp8(true, true, true).rowwise.codes;
  {
    torch::NoGradGuard g;
    f.layer->weight.add_(0.01);  // an optimizer step changes the weight version
  }
  f.layer->forward(x).sum().backward();
  REQUIRE(f.layer->weight_fp8(true, true, true).rowwise.codes.data_ptr() != codes2.data_ptr());
}

TEST_CASE("fp8 linear: evaluation does not record amax", "[fp8]") {
  Fixture f(Recipe{});
  f.layer->eval();
  torch::NoGradGuard g;
  const at::Tensor y = f.layer->forward(torch::randn({4, 64}));
  REQUIRE(y.sizes() == at::IntArrayRef({4, 48}));
  REQUIRE(f.scaling->amax_history().abs().sum().item<float>() == 0.0f);
}

TEST_CASE("fp8 linear: a backward after the layers are destroyed still works (the graph holds their state)",
          "[fp8]") {
  // fc -> GELU fused into the casts -> proj, built twice from one seed; one copy is destroyed
  // between its forward and its backward. Its autograd nodes hold the layers' gradient state
  // (scaling, slots, the GELU's gradient hand-over), never the layers themselves.
  struct Mlp {
    std::shared_ptr<DelayedScaling> scaling = std::make_shared<DelayedScaling>(Recipe{});
    std::shared_ptr<Fp8Linear> fc, proj;
    std::shared_ptr<Fp8Gelu> act;
    Mlp() {
      torch::manual_seed(9);
      fp8t::model::Linear fc_src(64, 128, true), proj_src(128, 48, true);
      fc = std::make_shared<Fp8Linear>(fc_src, "fc", scaling);
      proj = std::make_shared<Fp8Linear>(proj_src, "proj", scaling);
      act = std::make_shared<Fp8Gelu>(fc, proj);
      scaling->finalize(at::kCPU);
    }
    at::Tensor forward(const at::Tensor& x) { return proj->forward(act->forward(fc->forward(x))); }
  };
  torch::manual_seed(10);
  const at::Tensor x_alive = torch::randn({16, 64}).requires_grad_();
  const at::Tensor x_gone = x_alive.detach().clone().requires_grad_();
  const at::Tensor dy = torch::randn({16, 48});

  Mlp alive;
  alive.forward(x_alive).backward(dy);

  auto gone = std::make_unique<Mlp>();
  const at::Tensor fc_weight = gone->fc->weight, proj_bias = gone->proj->bias;
  const at::Tensor y = gone->forward(x_gone);
  gone.reset();  // the layers, the GELU and the model's reference to the scaling state are gone
  y.backward(dy);

  REQUIRE(at::equal(x_gone.grad(), x_alive.grad()));
  REQUIRE(at::equal(fc_weight.grad(), alive.fc->weight.grad()));
  REQUIRE(at::equal(proj_bias.grad(), alive.proj->bias.grad()));
}

namespace {

// A layer on its own recipe state, from seed 13 (two calls give equal weights in separate tensors).
struct Layer {
  std::shared_ptr<Scaling> scaling;
  std::shared_ptr<Fp8Linear> fc;
  explicit Layer(const Recipe& r) {
    torch::manual_seed(13);
    fp8t::model::Linear src(128, 64, true);
    scaling = make_scaling(r);
    fc = std::make_shared<Fp8Linear>(src, "fc", scaling);
    scaling->finalize(at::kCPU);
  }
};

}  // namespace

TEST_CASE("fp8 linear: dgrad's transposed weight and wgrad's input recast in the backward change no bit", "[fp8]") {
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock}) {
    INFO("recipe " << to_string(kind));
    Recipe r;
    r.kind = kind;
    Layer kept(r), later(r);
    later.fc->set_transposes_weight(true);
    later.fc->set_recasts_input_columnwise(true);
    torch::manual_seed(14);
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const at::Tensor x = torch::randn({2, 24, 128}) * (1.0 + step), dy = torch::randn({48, 64}) * 1e-2;
      const at::Tensor xk = x.clone().requires_grad_(), xl = x.clone().requires_grad_();
      // A view of a tensor that stays alive, as attention's output is: the layer keeps the view.
      const at::Tensor yk = kept.fc->forward(xk.view({48, 128})), yl = later.fc->forward(xl.view({48, 128}));
      REQUIRE(at::equal(yk, yl));
      CHECK(kept.fc->cached_weight().columnwise.defined());
      CHECK_FALSE(later.fc->cached_weight().columnwise.defined());  // dgrad makes it from the rowwise codes
      yk.backward(dy);
      yl.backward(dy);
      REQUIRE(at::equal(xk.grad(), xl.grad()));
      REQUIRE(at::equal(kept.fc->weight.grad(), later.fc->weight.grad()));
      REQUIRE(at::equal(kept.fc->bias.grad(), later.fc->bias.grad()));
      REQUIRE(at::equal(kept.scaling->amax_history(), later.scaling->amax_history()));  // nothing recorded twice
      for (Layer* l : {&kept, &later}) {
        l->scaling->end_micro_batch(true);  // delayed: new scales; every recipe: the weight is cast again
        l->fc->zero_grad();
      }
    }
    if (kind == RecipeKind::kDelayed) REQUIRE(later.scaling->scale().ne(1.0).any().item<bool>());
  }
}
