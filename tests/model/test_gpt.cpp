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
  const auto c_fc = std::dynamic_pointer_cast<model::Linear>(gpt.blocks[0]->dense_mlp()->c_fc);
  REQUIRE(c_fc->out_features == 2 * 128);  // gate and up fused
  REQUIRE_FALSE(c_fc->bias.defined());
  const at::Tensor logits = gpt.forward(torch::randint(0, 50, {2, 12}));
  REQUIRE(logits.isfinite().all().item<bool>());
  // RMSNorm: unit RMS per row at init (weight 1).
  auto norm = std::dynamic_pointer_cast<model::Norm>(gpt.blocks[0]->ln_1);
  const at::Tensor y = norm->forward(torch::randn({5, 32}) * 7.0);
  REQUIRE(at::allclose(y.pow(2).mean(-1), torch::ones({5}), 1e-4, 1e-4));
}

// FLOPs per token by docs/benchmarks.md's formula, 6 N + 12 L T d, with N the non-embedding
// parameters (a tied LM head counted once) counted here by hand from each shape, never from the
// model: the model's own parameter_count() is what the formula's code could get wrong.
TEST_CASE("gpt: flops per token is 6 N + 12 L T d for GPT-2 (tied and untied) and LLaMA (GQA, SwiGLU)",
          "[model]") {
  constexpr double d = 32, L = 2, T = 12, V = 50, attention = 12 * L * T * d;
  SECTION("GPT-2, untied head") {
    // Per block: ln_1 and ln_2 (weight + bias), c_attn d x 3d + bias, c_proj d x d + bias,
    // c_fc d x 4d + bias, c_proj 4d x d + bias; then ln_f and the head d x V (no bias). The
    // embeddings wte (V x d) and wpe (T x d) are not counted.
    const double block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
    const double n = L * block + 2 * d + d * V;
    model::Gpt gpt(tiny());
    REQUIRE(gpt.flops_per_token() == Approx(6 * n + attention).epsilon(1e-12));
  }
  SECTION("GPT-2, tied head: the head is wte, counted once, so N is the untied one's") {
    ModelSection m = tiny();
    m.tie_embeddings = true;
    const double block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
    const double n = L * block + 2 * d + V * d;
    model::Gpt gpt(m);
    REQUIRE(gpt.flops_per_token() == Approx(6 * n + attention).epsilon(1e-12));
  }
  SECTION("LLaMA: RMSNorm, RoPE, no bias, GQA 4 query / 2 K/V heads, SwiGLU d_ff 48, untied head") {
    ModelSection m = tiny();
    m.norm = NormKind::kRMSNorm;
    m.position = PositionKind::kRope;
    m.bias = false;
    m.n_kv_head = 2;
    m.activation = Activation::kSwiGLU;
    m.d_ff = 48;
    // head_dim 32 / 4 = 8; q d x d, k and v d x (2 * 8) each; attention's output d x d; SwiGLU's
    // gate and up d x 48 each, down 48 x d; two RMSNorm weights per block and ln_f's; the head.
    const double hd = 8, kv = 2, ff = 48;
    const double block = 2 * d + (d * d + 2 * d * kv * hd) + d * d + (2 * d * ff + ff * d);
    const double n = L * block + d + d * V;
    model::Gpt gpt(m);
    REQUIRE(gpt.flops_per_token() == Approx(6 * n + attention).epsilon(1e-12));
    // The same N by the model's count: every parameter but wte (RoPE has no position table).
    REQUIRE(static_cast<double>(gpt.parameter_count()) == n + V * d);
  }
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
  // train.loss_chunk_mib reaches the op: a budget of 5 rows of logits (10 chunks of the 48 rows)
  // gives the same loss up to the BF16 logits' rounding (the same bound as above).
  gpt.set_loss_chunk_bytes(5 * 50 * 2);
  const at::Tensor small_chunks = gpt.forward_loss(idx, targets);
  REQUIRE(chunked(small_chunks));
  CHECK(std::fabs(small_chunks.item<double>() - ref.item<double>()) <= std::ldexp(1.0, -8) * ref.item<double>());
}

namespace {
// Unit hooks that do nothing: with hooks set the model does not hand a tied head's weight gradient
// to the embedding (the sharded holder's hooks must see each unit's gradients as autograd makes them).
class NoHooks : public model::UnitHooks {
 public:
  void before_forward(int /*unit*/) override {}
  std::vector<at::Tensor> after_forward(int /*unit*/, std::vector<at::Tensor> outputs) override { return outputs; }
};
}  // namespace

TEST_CASE("gpt: a tied head's weight gradient handed to the embedding equals autograd's sum of the two", "[model]") {
  torch::manual_seed(3);
  ModelSection m = tiny();
  m.tie_embeddings = true;
  model::Gpt gpt(m);
  const at::Tensor idx = torch::randint(0, 50, {4, 12});
  const at::Tensor targets = torch::randint(0, 50, {4, 12});
  const compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16);
  auto wte_grad = [&] {
    gpt.forward_loss(idx, targets).backward();
    at::Tensor g = gpt.wte->weight.grad().clone();
    for (const auto& [name, p] : gpt.unique_named_parameters()) p.mutable_grad().reset();
    return g;
  };
  const at::Tensor handed = wte_grad();  // ops::tied_embedding takes the head's dW
  gpt.set_unit_hooks(std::make_shared<NoHooks>());
  const at::Tensor summed = wte_grad();  // autograd adds the dense embedding gradient to dW
  gpt.set_unit_hooks(nullptr);
  // The same FP32 terms in another order (tests/ops/test_tied_embedding.cpp: 2e-7 norm-wise).
  const double rel = ((handed - summed).norm() / summed.norm()).item<double>();
  CAPTURE(rel);
  CHECK(rel <= 2e-7);
  CHECK(!at::equal(handed, at::zeros_like(handed)));
}
