// lib/model/gpt.cpp on CUDA: the residual adds fused into the norms (ResidualNorm::forward_add,
// kernels/norm_*.cu fp8t_add_norm_*) give the logits of the unfused model bit for bit in fp8, where
// every norm is an FP8 norm and the fused kernel runs the unfused one's add and reductions. The
// unfused model is the same model under recompute attention (each part keeps its own add), run as
// evaluation (a plain forward, no recompute node); recompute mlp and block fuse the attention's
// adds only.
#include <torch/torch.h>  // torch::cuda::is_available

#include "lib/fp8/layers/fp8_norm.h"  // fp8::Fp8Norm
#include "lib/model/gpt.h"            // model::Gpt
#include "lib/step/session.h"         // step::Session
#include "lib/util/torch_compat.h"    // compat::AutocastGuard
#include "tests/catch.h"

using namespace fp8t;

TEST_CASE("gpt on CUDA: fused residual adds give the unfused logits bit for bit (fp8)", "[model][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const bool llama = GENERATE(false, true);
  INFO((llama ? "LLaMA" : "GPT-2") << " shape");
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  c.run.device = DeviceKind::kCuda;
  c.model.vocab_size = 512;
  c.model.n_layer = 3;
  c.model.d_model = 256;
  c.model.n_head = 4;
  c.model.seq_len = 128;
  if (llama) {
    c.model.position = PositionKind::kRope;
    c.model.norm = NormKind::kRMSNorm;
    c.model.activation = Activation::kSwiGLU;
    c.model.bias = false;
    c.model.tie_embeddings = false;
  }
  c.fp8.skip_layers = {};  // lm_head in FP8 too, so ln_f is an FP8 norm like the others
  const at::Device cuda(at::kCUDA);
  step::Session session(c, cuda);
  session.prepare_training(nullptr);
  auto& gpt = dynamic_cast<model::Gpt&>(session.model());
  REQUIRE(std::dynamic_pointer_cast<fp8::Fp8Norm>(gpt.ln_f) != nullptr);
  REQUIRE(std::dynamic_pointer_cast<fp8::Fp8Norm>(gpt.blocks[1]->ln_1) != nullptr);
  gpt.eval();
  torch::NoGradGuard no_grad;
  compat::AutocastGuard autocast(at::kCUDA, at::kBFloat16);  // as the training step runs it
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor idx = at::randint(512, {4, 128}, gen, at::kLong).to(cuda);
  const at::Tensor fused = gpt.forward(idx);
  gpt.set_recompute(Recompute::kAttention);
  const at::Tensor unfused = gpt.forward(idx);
  gpt.set_recompute(Recompute::kMlp);
  const at::Tensor mlp_parts = gpt.forward(idx);
  gpt.set_recompute(Recompute::kBlock);
  const at::Tensor block_part = gpt.forward(idx);
  REQUIRE(fused.isfinite().all().item<bool>());
  CHECK(at::equal(fused, unfused));
  CHECK(at::equal(mlp_parts, unfused));
  CHECK(at::equal(block_part, unfused));
}
