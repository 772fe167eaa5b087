// BlockScaling on the CUDA backend: an Fp8Linear's three GEMMs against the CPU emulation (same
// weights and inputs: the same block codes and scales, bit for bit, then cuBLASLt's block-scaled
// GEMMs against FP32 GEMMs of the dequantized operands); the fused GELU block casts against the
// CPU cast of the kernels' GELU values, and a GPT with them against its unfused twin.
#include <torch/torch.h>  // torch::randn

#include "lib/fp8/recipes/block_scaling.h"  // BlockScaling
#include "lib/fp8/layers/fp8_linear.h"      // Fp8Linear
#include "tests/catch.h"
#include "tests/tensor_compare.h"  // test::rel_err
#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream

#include "fp8t_block_kernels.h"               // fp8t_activation_values, FP8T_ACT_*
#include "lib/fp8/backends/block_quantize.h"  // block_quantize_cpu
#include "lib/fp8/layers/fp8_activation.h"    // Fp8Gelu
#include "lib/fp8/rewrite.h"                  // rewrite_to_fp8
#include "lib/model/gpt.h"                    // Gpt
#endif

using namespace fp8t::fp8;

using fp8t::test::rel_err;

namespace {

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
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
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

#if defined(FP8T_WITH_CUDA)
namespace {

// The values the fused kernels cast (their own GELU functions), on the GPU.
at::Tensor kernel_values(int act, const at::Tensor& x, const at::Tensor& h) {
  at::Tensor out = at::empty_like(x);
  REQUIRE(fp8t_activation_values(act, x.data_ptr(), h.defined() ? h.data_ptr() : nullptr,
                                 x.scalar_type() == at::kFloat ? FP8T_DTYPE_F32 : FP8T_DTYPE_BF16, x.numel(),
                                 out.data_ptr(), at::cuda::getCurrentCUDAStream().stream()) == cudaSuccess);
  return out;
}

void require_same_cast(const Fp8Tensor& got, const at::Tensor& values) {
  const BlockQuantized want = block_quantize_cpu(values.cpu(), 1, true, true, true);
  REQUIRE(got.rowwise.scale_layout == ScaleLayout::kBlock1x128);
  REQUIRE(at::equal(got.rowwise.codes.cpu(), want.rowwise.codes));
  REQUIRE(at::equal(got.columnwise.codes.cpu(), want.columnwise.codes));
  REQUIRE(at::equal(got.rowwise.scale_inv.cpu(), want.rowwise.scale_inv));
  REQUIRE(at::equal(got.columnwise.scale_inv.cpu(), want.columnwise.scale_inv));
}

}  // namespace

TEST_CASE("block scaling on CUDA: GELU sources are cast in one kernel, bit-exact against the CPU cast of its values",
          "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  Recipe r;
  r.kind = RecipeKind::kBlock;
  BlockScaling s(r);
  const int in = s.add_slot("fc2:input", TensorRole::kInput), grad = s.add_slot("fc1:grad_output", TensorRole::kGradOutput);
  s.finalize(gpu);
  for (at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
    INFO(c10::toString(dt));
    torch::manual_seed(5);
    // 272 tokens x 400 features: partial 128-blocks both ways.
    const at::Tensor h = (torch::randn({272, 400}) * 3).to(dt).to(gpu), dy = torch::randn({272, 400}).to(dt).to(gpu);
    CastOptions both;
    both.columnwise = true;
    require_same_cast(s.quantize(in, CastSource::gelu(h), both), kernel_values(FP8T_ACT_GELU, h, at::Tensor()));
    at::Tensor dbias;
    both.dbias = &dbias;
    const at::Tensor dh = kernel_values(FP8T_ACT_DGELU, dy, h);
    require_same_cast(s.quantize(grad, CastSource::dgelu(dy, h), both), dh);
    // dbias: FP32 column sums in another order than LibTorch's; within 272 * 2^-24 * sum |dh|.
    const at::Tensor ref = dh.to(at::kDouble).sum(0), bound = dh.to(at::kDouble).abs().sum(0) * (272.0 / (1 << 24));
    REQUIRE(((dbias.to(at::kDouble) - ref).abs() <= bound).all().item<bool>());
  }
}

TEST_CASE("block scaling on CUDA: a GPT's fused GELU block casts give the unfused model's loss and gradients",
          "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  fp8t::ModelSection m;
  m.vocab_size = 64;
  m.seq_len = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  m.bias = true;
  Recipe recipe;
  recipe.kind = RecipeKind::kBlock;
  std::shared_ptr<fp8t::model::Gpt> fused, plain;
  for (auto* side : {&fused, &plain}) {
    torch::manual_seed(21);
    *side = std::make_shared<fp8t::model::Gpt>(m);
    (*side)->to(gpu);
  }
  const RewriteResult frw = rewrite_to_fp8(*fused, recipe, gpu), prw = rewrite_to_fp8(*plain, recipe, gpu);
  REQUIRE(std::dynamic_pointer_cast<Fp8Gelu>(fused->blocks[0]->dense_mlp()->act) != nullptr);
  for (auto& b : plain->blocks) {
    b->mlp->replace_slot("act", std::make_shared<fp8t::model::Activation>(fp8t::model::Activation::Kind::kGeluTanh));
  }
  torch::manual_seed(4);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const at::Tensor idx = torch::randint(0, 64, {3, 17}).to(gpu);
    const auto run = [&](fp8t::model::Gpt& gpt) {
      const at::Tensor loss = fp8t::model::Gpt::loss(gpt.forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
      loss.backward();
      return loss.detach().item<double>();
    };
    const double lf = run(*fused), lp = run(*plain);
    // The kernel's GELU and ATen's may differ in the last FP32 bit, which can move an FP8 code
    // (or, rarely, a block's power-of-2 scale) by one step: 1e-3 relative on the loss and on
    // every gradient's norm, as for the per-tensor fused GELU.
    REQUIRE(lf == Approx(lp).epsilon(1e-3));
    const auto pp = plain->named_parameters();
    for (const auto& item : fused->named_parameters()) {
      INFO(item.key());
      const at::Tensor gf = item.value().grad().to(at::kDouble), gp = pp[item.key()].grad().to(at::kDouble);
      REQUIRE(((gf - gp).norm() / gp.norm().clamp_min(1e-30)).item<double>() < 1e-3);
    }
    frw.scaling->end_micro_batch(true);
    prw.scaling->end_micro_batch(true);
    fused->zero_grad();
    plain->zero_grad();
  }
}
#endif  // FP8T_WITH_CUDA
