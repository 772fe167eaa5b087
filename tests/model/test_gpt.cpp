// lib/model/gpt.* and layers.*
#include "lib/model/gpt.h"

#include <cmath>   // std::log
#include <memory>  // std::shared_ptr
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/util/torch_compat.h"  // compat::AutocastGuard
#include "tests/catch.h"

using namespace fp8t;

namespace {

// A norm that counts the residual adds the model routes through it (its forward_add).
class CountingNorm : public model::Norm {
 public:
  explicit CountingNorm(const model::Norm& src) : model::Norm(src.kind, src.dim, src.eps, src.bias.defined()) {}
  model::AddNormOutput forward_add(const at::Tensor& x, const at::Tensor& h) override {
    ++calls;
    return model::Norm::forward_add(x, h);
  }
  int calls = 0;
};

ModelSection tiny() {
  ModelSection m;
  m.vocab_size = 50;
  m.seq_len = 12;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 32;
  return m;
}
}  // namespace

TEST_CASE("gpt: output shape and parameter count", "[model]") {
  torch::manual_seed(0);
  const ModelSection m = tiny();
  model::Gpt gpt(m);
  const at::Tensor logits = gpt.forward(torch::randint(0, 50, {3, 12}));
  REQUIRE(logits.sizes() == at::IntArrayRef({3, 12, 50}));
  // wte 50*32 + wpe 12*32 + per block (2 LN: 4*32, c_attn 32*96+96, c_proj 32*32+32,
  // c_fc 32*128+128, c_proj 128*32+32) + ln_f 2*32 + head 32*50
  const int64_t block = 4 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32);
  REQUIRE(gpt.parameter_count() == 50 * 32 + 12 * 32 + 2 * block + 2 * 32 + 32 * 50);
}

TEST_CASE("gpt: tied embeddings share one tensor and count once", "[model]") {
  ModelSection m = tiny();
  m.tie_embeddings = true;
  model::Gpt gpt(m);
  auto head = std::dynamic_pointer_cast<model::Linear>(gpt.lm_head);
  REQUIRE(head->weight.data_ptr() == gpt.wte->weight.data_ptr());
  model::Gpt untied(tiny());
  REQUIRE(untied.parameter_count() - gpt.parameter_count() == 50 * 32);
}

TEST_CASE("gpt: attention is causal", "[model]") {
  torch::manual_seed(0);
  model::Gpt gpt(tiny());
  gpt.eval();
  torch::NoGradGuard g;
  at::Tensor idx = torch::randint(0, 50, {1, 12});
  const at::Tensor a = gpt.forward(idx);
  idx[0][8] = (idx[0][8].item<int64_t>() + 1) % 50;  // change a later token
  const at::Tensor b = gpt.forward(idx);
  REQUIRE(at::allclose(a.narrow(1, 0, 8), b.narrow(1, 0, 8), 0.0, 1e-6));
  REQUIRE_FALSE(at::allclose(a.narrow(1, 8, 1), b.narrow(1, 8, 1), 0.0, 1e-6));
}

TEST_CASE("gpt: initial loss is close to ln(vocab)", "[model]") {
  torch::manual_seed(0);
  model::Gpt gpt(tiny());
  const at::Tensor idx = torch::randint(0, 50, {8, 12});
  const double loss = model::Gpt::loss(gpt.forward(idx), torch::randint(0, 50, {8, 12})).item<double>();
  // Init std 0.02 keeps logits near zero: uniform prediction within 0.1 nats.
  REQUIRE(std::fabs(loss - std::log(50.0)) < 0.1);
}

TEST_CASE("gpt: RMSNorm and SwiGLU variants run and differ from the default", "[model]") {
  ModelSection m = tiny();
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.bias = false;
  torch::manual_seed(0);
  model::Gpt gpt(m);
  const auto c_fc = std::dynamic_pointer_cast<model::Linear>(gpt.blocks[0]->mlp->c_fc);
  REQUIRE(c_fc->out_features == 2 * 128);  // gate and up fused
  REQUIRE_FALSE(c_fc->bias.defined());
  const at::Tensor logits = gpt.forward(torch::randint(0, 50, {2, 12}));
  REQUIRE(logits.isfinite().all().item<bool>());
  // RMSNorm: unit RMS per row at init (weight 1).
  auto norm = std::dynamic_pointer_cast<model::Norm>(gpt.blocks[0]->ln_1);
  const at::Tensor y = norm->forward(torch::randn({5, 32}) * 7.0);
  REQUIRE(at::allclose(y.pow(2).mean(-1), torch::ones({5}), 1e-4, 1e-4));
}

TEST_CASE("gpt: flops per token follows 6N + 12 L T d", "[model]") {
  model::Gpt gpt(tiny());
  const double n_dense = static_cast<double>(gpt.parameter_count() - 50 * 32 - 12 * 32);
  REQUIRE(gpt.flops_per_token() == Approx(6.0 * n_dense + 12.0 * 2 * 12 * 32));
}

TEST_CASE("gpt: residual adds go through the norm after them where no recompute part lies between", "[model]") {
  // Without recompute every add is handed to the norm reading it (the MLP's to the next block's
  // ln_1 or ln_f): 2 per block. With recompute block or mlp only the attention's (into ln_2), with
  // attention none (its part keeps its own add). activation and casts recompute no part (only FP8
  // copies, in an FP8 run): every add, as none. The logits are the same bits either way.
  const Recompute mode = GENERATE(Recompute::kNone, Recompute::kActivation, Recompute::kCasts, Recompute::kAttention,
                                  Recompute::kMlp, Recompute::kBlock);
  const bool rms = GENERATE(false, true);
  INFO("recompute " << static_cast<int>(mode) << ", RMSNorm " << rms);
  ModelSection m = tiny();
  m.n_layer = 3;
  if (rms) m.norm = NormKind::kRMSNorm;
  torch::manual_seed(1);
  model::Gpt plain(m);
  torch::manual_seed(1);
  model::Gpt counted(m);
  std::vector<std::shared_ptr<CountingNorm>> norms;
  auto count = [&](model::SlotModule& owner, const std::string& slot) {
    auto n = std::make_shared<CountingNorm>(dynamic_cast<const model::Norm&>(*owner.slot(slot)));
    owner.replace_slot(slot, n);
    norms.push_back(n);
  };
  for (auto& b : counted.blocks) {
    count(*b, "ln_1");
    count(*b, "ln_2");
  }
  count(counted, "ln_f");
  plain.set_recompute(mode);
  counted.set_recompute(mode);
  const at::Tensor idx = torch::randint(0, 50, {2, 12});
  const at::Tensor want = plain.forward(idx);
  const at::Tensor got = counted.forward(idx);
  REQUIRE(at::equal(got, want));
  int calls = 0;
  for (const auto& n : norms) calls += n->calls;
  const bool like_none = mode == Recompute::kNone || mode == Recompute::kActivation || mode == Recompute::kCasts;
  const int expected = like_none ? 2 * 3 : mode == Recompute::kAttention ? 0 : 3;
  REQUIRE(calls == expected);
  if (like_none) REQUIRE(norms.front()->calls == 0);  // block 0's ln_1 reads the embeddings
}

TEST_CASE("gpt: Norm::forward_add on the CPU is x + h and the norm of it, gradients too", "[model]") {
  const bool rms = GENERATE(false, true);
  model::Norm norm(rms ? model::Norm::Kind::kRMSNorm : model::Norm::Kind::kLayerNorm, 16, 1e-5, true);
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({3, 16}, torch::requires_grad()), h = torch::randn({3, 16}, torch::requires_grad());
  const model::AddNormOutput o = norm.forward_add(x, h);
  const at::Tensor r = (x + h).detach();
  REQUIRE(at::equal(o.sum, r));
  REQUIRE(at::equal(o.y, norm.forward(r)));
  (o.y.pow(2).sum() + o.sum.sum()).backward();
  REQUIRE(at::equal(x.grad(), h.grad()));  // dx = dh = dr
}

TEST_CASE("gpt: head_loss runs the chunked head where the head computes in BF16, else the unchunked one", "[model]") {
  torch::manual_seed(0);
  ModelSection m = tiny();
  m.tie_embeddings = GENERATE(false, true);
  INFO("tied " << m.tie_embeddings);
  model::Gpt gpt(m);
  const at::Tensor idx = torch::randint(0, 50, {4, 12});
  const at::Tensor targets = torch::randint(0, 50, {4, 12});
  auto chunked = [](const at::Tensor& loss) {
    return loss.grad_fn() != nullptr && loss.grad_fn()->name().find("LinearCrossEntropy") != std::string::npos;
  };
  // All gradients, flattened, after a backward of `loss` (then cleared).
  auto grads = [&](const at::Tensor& loss) {
    loss.backward();
    std::vector<at::Tensor> g;
    for (const auto& [name, p] : gpt.unique_named_parameters()) {
      g.push_back(p.grad().reshape({-1}).clone());
      p.mutable_grad().reset();
    }
    return at::cat(g);
  };
  // fp32: the unchunked head, today's loss bit for bit.
  const at::Tensor fp32 = gpt.forward_loss(idx, targets);
  CHECK_FALSE(chunked(fp32));
  CHECK(at::equal(fp32, model::Gpt::loss(gpt.forward(idx), targets)));
  {
    const compat::AutocastGuard fp16(c10::DeviceType::CPU, at::kHalf);
    CHECK_FALSE(chunked(gpt.forward_loss(idx, targets)));  // the loss scale must reach the head's backward
  }
  const compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16);
  const at::Tensor loss = gpt.forward_loss(idx, targets);
  REQUIRE(chunked(loss));
  const at::Tensor ref = model::Gpt::loss(gpt.forward(idx), targets);
  // The same BF16 GEMMs but in chunks, the gradient made in the forward: rounding-level
  // differences (BF16 logits may land an ulp apart: 2^-8 relative on the loss; the gradients are
  // BF16 products, norm-wise 1e-2 over all parameters).
  CHECK(std::fabs(loss.item<double>() - ref.item<double>()) <= std::ldexp(1.0, -8) * ref.item<double>());
  const at::Tensor g = grads(loss), g_ref = grads(ref);
  const double rel = ((g - g_ref).norm() / g_ref.norm()).item<double>();
  CAPTURE(rel);
  CHECK(rel <= 1e-2);
}
