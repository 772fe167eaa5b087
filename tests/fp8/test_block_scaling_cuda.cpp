// BlockScaling on the CUDA backend: an Fp8Linear's three GEMMs against the CPU emulation (same
// weights and inputs: the same block codes and scales, bit for bit, then cuBLASLt's block-scaled
// GEMMs against FP32 GEMMs of the dequantized operands).
#include <torch/torch.h>  // torch::randn

#include "lib/fp8/block_scaling.h"  // BlockScaling
#include "lib/fp8/fp8_linear.h"     // Fp8Linear
#include "tests/catch.h"

using namespace fp8t::fp8;

namespace {

double rel_err(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor a64 = a.detach().cpu().to(at::kDouble), r64 = ref.detach().cpu().to(at::kDouble);
  return ((a64 - r64).norm() / r64.norm()).item<double>();
}

struct Side {
  std::shared_ptr<BlockScaling> scaling;
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
  Recipe r;
  r.kind = RecipeKind::kBlock;
  Side s;
  s.scaling = std::make_shared<BlockScaling>(r);
  s.layer = std::make_shared<Fp8Linear>(copy, "fc", s.scaling);
  s.scaling->finalize(device);
  return s;
}

}  // namespace

TEST_CASE("block scaling: Fp8Linear on CUDA matches the CPU emulation", "[fp8][cuda]") {
  REQUIRE(torch::cuda::is_available());
  torch::manual_seed(13);
  // in 384 = 3 blocks of 128, out 272: a partial 128-block in N (and in dgrad's K).
  fp8t::model::Linear src(384, 272, true);
  {
    torch::NoGradGuard g;
    src.bias.normal_(0.0, 0.1);
  }
  const at::Device gpu(at::kCUDA, 0);
  Side cpu = make(src, at::kCPU), cuda = make(src, gpu);
  for (int step = 0; step < 2; ++step) {
    // Rows of very different magnitudes: what block scales are for.
    const at::Tensor x = torch::randn({96, 384}) * at::pow(2.0, torch::randint(-8, 8, {96, 1}));
    const at::Tensor dy = torch::randn({96, 272}) * 1e-3;
    const at::Tensor xc = x.clone().requires_grad_(), xg = x.to(gpu).requires_grad_();
    const at::Tensor yc = cpu.layer->forward(xc), yg = cuda.layer->forward(xg);
    yc.backward(dy);
    yg.backward(dy.to(gpu));
    INFO("step " << step);
    // Same block codes and scales on both sides (the [cuda] kernel tests prove the casts
    // bit-exact); the GPU sums the products on tensor cores with split accumulation into FP32,
    // the CPU in FP32 in another order: 1e-3 relative Frobenius covers the accumulation order.
    REQUIRE(rel_err(yg, yc) < 1e-3);
    REQUIRE(rel_err(xg.grad(), xc.grad()) < 1e-3);
    REQUIRE(rel_err(cuda.layer->weight.grad(), cpu.layer->weight.grad()) < 1e-3);
    REQUIRE(rel_err(cuda.layer->bias.grad(), cpu.layer->bias.grad()) < 1e-5);
    cpu.scaling->end_micro_batch(true);
    cuda.scaling->end_micro_batch(true);
    cpu.layer->zero_grad();
    cuda.layer->zero_grad();
  }
}
