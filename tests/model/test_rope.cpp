// lib/model/rope.* and the attention variants of lib/model/gpt.* (RoPE, GQA, separate q/k/v).
#include "lib/model/rope.h"

#include <cmath>  // std::pow, std::cos, std::sin

#include "lib/model/gpt.h"
#include "tests/catch.h"

using namespace fp8t;

namespace {

ModelSection tiny_llama() {
  ModelSection m;
  m.vocab_size = 50;
  m.seq_len = 12;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 32;
  m.position = PositionKind::kRope;
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.bias = false;
  return m;
}

std::shared_ptr<model::Linear> linear(const std::shared_ptr<model::UnaryModule>& m) {
  return std::dynamic_pointer_cast<model::Linear>(m);
}

// K/V rows [n_kv_head * D, in] -> [n_head * D, in], each K/V head repeated for the query heads it
// serves (head h reads K/V head h / group, as scaled_dot_product_attention's enable_gqa does).
at::Tensor repeat_heads(const at::Tensor& w, int64_t n_kv_head, int64_t group) {
  return w.view({n_kv_head, -1, w.size(1)}).repeat_interleave(group, 0).reshape({-1, w.size(1)});
}

}  // namespace

TEST_CASE("rope: matches a float64 reference at every position and pair", "[model]") {
  const int64_t T = 300, D = 16;
  const double theta = 500000.0;
  model::Rotary rope(T, D, theta);
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({2, 3, T, D});
  const at::Tensor y = rope.apply(x);
  REQUIRE(y.scalar_type() == at::kFloat);

  // Reference: pair i = (x[i], x[i + D/2]) rotated by t * theta^(-2i/D), all in float64.
  const at::Tensor xd = x.to(at::kDouble);
  at::Tensor ref = torch::empty_like(xd);
  auto xa = xd.accessor<double, 4>();
  auto ra = ref.accessor<double, 4>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / D);
          const double x1 = xa[b][h][t][i], x2 = xa[b][h][t][i + D / 2];
          ra[b][h][t][i] = x1 * std::cos(a) - x2 * std::sin(a);
          ra[b][h][t][i + D / 2] = x2 * std::cos(a) + x1 * std::sin(a);
        }
  // FP32 arithmetic on |x| < ~5: cos/sin rounded to FP32 (2^-24 relative), two products and a
  // sum rounded once each: a few 1e-7 absolute. 2e-6 leaves margin but catches any wrong angle.
  const double err = (y.to(at::kDouble) - ref).abs().max().item<double>();
  INFO("max abs error " << err);
  CHECK(err < 2e-6);
  // Position 0 is the identity.
  CHECK(at::equal(y.select(2, 0), x.select(2, 0)));
}

TEST_CASE("rope: scores depend only on the distance between positions", "[model]") {
  const int64_t D = 8;
  model::Rotary rope(64, D, 10000.0);
  torch::manual_seed(4);
  const at::Tensor q = torch::randn({D}), k = torch::randn({D});
  auto at_pos = [&](const at::Tensor& v, int64_t t) {
    return rope.apply(v.view({1, 1, 1, D}).expand({1, 1, 64, D}).contiguous()).select(2, t).flatten();
  };
  const double s1 = at::dot(at_pos(q, 10), at_pos(k, 7)).item<double>();
  const double s2 = at::dot(at_pos(q, 40), at_pos(k, 37)).item<double>();
  // FP32 rotation of unit-scale vectors: 1e-5 absolute on a dot product of 8 terms.
  CHECK(s1 == Approx(s2).margin(1e-5));
}

TEST_CASE("rope: a bf16 input is rotated in FP32 and rounded once", "[model]") {
  model::Rotary rope(16, 8, 10000.0);
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({1, 2, 16, 8}).to(at::kBFloat16);
  const at::Tensor y = rope.apply(x);
  REQUIRE(y.scalar_type() == at::kBFloat16);
  CHECK(at::equal(y, rope.apply(x.to(at::kFloat)).to(at::kBFloat16)));
}

TEST_CASE("gqa: attention equals MHA with the K/V heads repeated", "[model]") {
  for (const bool fused : {true, false}) {
    INFO("fused_qkv " << fused);
    ModelSection gqa_cfg = tiny_llama();
    gqa_cfg.fused_qkv = fused;
    ModelSection mha_cfg = gqa_cfg;
    mha_cfg.n_kv_head = gqa_cfg.n_head;
    const int64_t D = 8, group = 2, kv_rows = 2 * D, d = 32;
    torch::manual_seed(6);
    auto rotary = std::make_shared<model::Rotary>(12, D, 10000.0);
    model::CausalSelfAttention gqa(gqa_cfg, rotary), mha(mha_cfg, rotary);
    {
      torch::NoGradGuard no_grad;
      at::Tensor wq, wk, wv;
      if (fused) {
        const at::Tensor w = linear(gqa.c_attn)->weight;
        REQUIRE(w.size(0) == d + 2 * kv_rows);
        wq = w.narrow(0, 0, d), wk = w.narrow(0, d, kv_rows), wv = w.narrow(0, d + kv_rows, kv_rows);
        linear(mha.c_attn)->weight.copy_(at::cat({wq, repeat_heads(wk, 2, group), repeat_heads(wv, 2, group)}));
      } else {
        REQUIRE(linear(gqa.k_proj)->out_features == kv_rows);
        linear(mha.q_proj)->weight.copy_(linear(gqa.q_proj)->weight);
        linear(mha.k_proj)->weight.copy_(repeat_heads(linear(gqa.k_proj)->weight, 2, group));
        linear(mha.v_proj)->weight.copy_(repeat_heads(linear(gqa.v_proj)->weight, 2, group));
      }
      linear(mha.c_proj)->weight.copy_(linear(gqa.c_proj)->weight);
    }
    const at::Tensor x = torch::randn({3, 12, d});
    const at::Tensor a = gqa.forward(x), b = mha.forward(x);
    // Same math, but the K/V GEMMs have other widths and SDPA may take another kernel path, so
    // the FP32 sums are ordered differently: a few ulps of outputs of size ~0.1.
    CHECK(at::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6));
  }
}

TEST_CASE("gpt: LLaMA shape has no position table, GQA widths, and separate q/k/v on request", "[model]") {
  torch::manual_seed(0);
  ModelSection m = tiny_llama();
  model::Gpt fused(m);
  REQUIRE_FALSE(fused.wpe);
  REQUIRE(fused.rotary);
  REQUIRE(linear(fused.blocks[0]->attn->c_attn)->out_features == 32 + 2 * 2 * 8);
  // c_attn 32*64, c_proj 32*32, c_fc 32*256, c_proj 128*32, two RMSNorms; wte, ln_f, head.
  const int64_t block = 32 * 64 + 32 * 32 + 32 * 256 + 128 * 32 + 2 * 32;
  CHECK(fused.parameter_count() == 50 * 32 + 2 * block + 32 + 32 * 50);

  m.fused_qkv = false;
  torch::manual_seed(0);
  model::Gpt separate(m);
  CHECK(separate.parameter_count() == fused.parameter_count());
  REQUIRE_FALSE(separate.blocks[0]->attn->c_attn);
  // Same weights in the other layout give the same logits.
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < fused.blocks.size(); ++i) {
      const auto& f = fused.blocks[i]->attn;
      const auto& s = separate.blocks[i]->attn;
      const at::Tensor w = linear(f->c_attn)->weight;
      linear(s->q_proj)->weight.copy_(w.narrow(0, 0, 32));
      linear(s->k_proj)->weight.copy_(w.narrow(0, 32, 16));
      linear(s->v_proj)->weight.copy_(w.narrow(0, 48, 16));
    }
    auto params = separate.named_parameters();
    for (const auto& p : fused.named_parameters()) {
      if (params.contains(p.key())) params[p.key()].copy_(p.value());
    }
  }
  const at::Tensor idx = torch::randint(0, 50, {2, 12});
  // Only the GEMM widths differ (blocking of the FP32 sums): 1e-5 relative.
  CHECK(at::allclose(fused.forward(idx), separate.forward(idx), 1e-5, 1e-6));
}

TEST_CASE("gpt: RoPE attention is causal", "[model]") {
  torch::manual_seed(0);
  model::Gpt gpt(tiny_llama());
  gpt.eval();
  torch::NoGradGuard g;
  at::Tensor idx = torch::randint(0, 50, {1, 12});
  const at::Tensor a = gpt.forward(idx);
  idx[0][8] = (idx[0][8].item<int64_t>() + 1) % 50;
  const at::Tensor b = gpt.forward(idx);
  CHECK(at::allclose(a.narrow(1, 0, 8), b.narrow(1, 0, 8), 0.0, 1e-6));
  CHECK_FALSE(at::allclose(a.narrow(1, 8, 1), b.narrow(1, 8, 1), 0.0, 1e-6));
}
