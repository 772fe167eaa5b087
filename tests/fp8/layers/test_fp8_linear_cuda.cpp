// Fp8Linear on the CUDA backend against the CPU emulation (same weights, inputs and scales).
#include <torch/torch.h>  // torch::randn

#include "lib/fp8/layers/fp8_linear.h"  // Fp8Linear
#include "lib/fp8/recipes/scaling.h"    // make_scaling
#include "tests/catch.h"
#include "tests/tensor_compare.h"  // test::rel_err

using namespace fp8t::fp8;

using fp8t::test::rel_err;

namespace {

struct Side {
  std::shared_ptr<DelayedScaling> scaling;
  std::shared_ptr<Fp8Linear> layer;
};

Side make(const fp8t::model::Linear& src, const at::Device& device) {
  fp8t::model::Linear copy(src.in_features, src.out_features, true);
  {
    torch::NoGradGuard g;
    copy.weight.copy_(src.weight);
    copy.bias.copy_(src.bias);
  }
  copy.to(device);
  Side s;
  s.scaling = std::make_shared<DelayedScaling>(Recipe{});
  s.layer = std::make_shared<Fp8Linear>(copy, "fc", s.scaling);
  s.scaling->finalize(device);
  return s;
}

}  // namespace

TEST_CASE("fp8 linear on CUDA matches the CPU emulation", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  torch::manual_seed(11);
  fp8t::model::Linear src(256, 192, true);
  {
    torch::NoGradGuard g;
    src.bias.normal_(0.0, 0.1);
  }
  const at::Device gpu(at::kCUDA, 0);
  Side cpu = make(src, at::kCPU), cuda = make(src, gpu);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor x = torch::randn({96, 256}) * (1.0 + step);
    const at::Tensor dy = torch::randn({96, 192}) * 1e-3;
    const at::Tensor xc = x.clone().requires_grad_(), xg = x.to(gpu).requires_grad_();
    const at::Tensor yc = cpu.layer->forward(xc), yg = cuda.layer->forward(xg);
    yc.backward(dy);
    yg.backward(dy.to(gpu));
    INFO("step " << step);
    // Same FP8 codes and scales on both sides; the GPU accumulates on tensor cores (fprop with
    // fast accumulation) and here returns FP32 out of FP32 inputs, so the products agree to
    // accumulation-order rounding: 1e-3 relative Frobenius.
    REQUIRE(rel_err(yg, yc) < 1e-3);
    REQUIRE(rel_err(xg.grad(), xc.grad()) < 1e-3);
    REQUIRE(rel_err(cuda.layer->weight.grad(), cpu.layer->weight.grad()) < 1e-3);
    REQUIRE(rel_err(cuda.layer->bias.grad(), cpu.layer->bias.grad()) < 1e-5);
    // The casts recorded the same amaxes, so the scale updates agree bit for bit.
    cpu.scaling->update();
    cuda.scaling->update();
    REQUIRE(at::equal(cuda.scaling->scale().cpu(), cpu.scaling->scale()));
    REQUIRE(at::equal(cuda.scaling->amax_history().cpu(), cpu.scaling->amax_history()));
    cpu.layer->zero_grad();
    cuda.layer->zero_grad();
  }
}

TEST_CASE("fp8 linear on CUDA: dgrad's transposed weight and wgrad's recast input change no bit, every recipe",
          "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock}) {
    INFO("recipe " << to_string(kind));
    Recipe r;
    r.kind = kind;
    auto make_layer = [&](bool later, std::shared_ptr<Scaling>* scaling) {
      torch::manual_seed(15);
      fp8t::model::Linear src(512, 384, true);
      src.to(gpu);
      *scaling = make_scaling(r);
      auto fc = std::make_shared<Fp8Linear>(src, "fc", *scaling);
      fc->set_transposes_weight(later);
      fc->set_recasts_input_columnwise(later);
      (*scaling)->finalize(gpu);
      return fc;
    };
    std::shared_ptr<Scaling> sk, sl;
    const auto kept = make_layer(false, &sk), later = make_layer(true, &sl);
    torch::manual_seed(16);
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      // bf16 activations as under autocast; 4 x 96 tokens: partial 128-blocks in wgrad's K.
      const at::Tensor x = (torch::randn({4, 96, 512}) * (1.0 + step)).to(gpu, at::kBFloat16);
      const at::Tensor dy = (torch::randn({384, 384}) * 1e-2).to(gpu, at::kBFloat16);
      const at::Tensor xk = x.clone().requires_grad_(), xl = x.clone().requires_grad_();
      // A view of a tensor that stays alive, as attention's output is: the layer keeps the view.
      const at::Tensor yk = kept->forward(xk.view({384, 512})), yl = later->forward(xl.view({384, 512}));
      REQUIRE(at::equal(yk, yl));
      REQUIRE_FALSE(later->cached_weight().columnwise.defined());
      yk.backward(dy);
      yl.backward(dy);
      // The same kernels on the same codes and scales: equal bit for bit (the GEMMs are
      // deterministic for one shape on one device).
      REQUIRE(at::equal(xk.grad(), xl.grad()));
      REQUIRE(at::equal(kept->weight.grad(), later->weight.grad()));
      REQUIRE(at::equal(kept->bias.grad(), later->bias.grad()));
      REQUIRE(at::equal(sk->amax_history(), sl->amax_history()));
      sk->end_micro_batch(true);
      sl->end_micro_batch(true);
      kept->zero_grad();
      later->zero_grad();
    }
  }
}
