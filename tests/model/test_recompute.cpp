// lib/model/recompute.* and train.recompute in lib/model/gpt.cpp: every mode computes the loss and
// the gradients of `none` bit for bit (fp32 and bf16 autocast on the CPU: the recompute runs the
// same ops on the same inputs, and each gradient sums the same terms in the same order, since every
// part ends with its residual add, and the MLP's starts with the attention's), and keeps fewer
// activation bytes alive between the forward and the backward (counted with a CPU allocation probe).
#include <torch/torch.h>  // torch::manual_seed

#include <memory>  // std::shared_ptr
#include <vector>  // std::vector

#include "lib/model/gpt.h"          // model::Gpt
#include "lib/model/recompute.h"    // recompute_in_backward
#include "lib/util/torch_compat.h"  // compat::AutocastGuard
#include "tests/catch.h"
#include "tests/config/config_test_util.h"  // bad_yaml_message
#include "tests/model/cpu_memory_probe.h"   // test::CpuMemoryProbe

using namespace fp8t;

namespace {

// GPT-2 shape: learned positions, LayerNorm with bias, GELU, one fused q/k/v GEMM.
ModelSection gpt2_shape() {
  ModelSection m;
  m.vocab_size = 50;
  m.seq_len = 16;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 32;
  return m;
}

// LLaMA shape: RoPE, RMSNorm (two uses of its input: the residual's gradient sums three terms),
// SwiGLU, no biases, untied head, grouped-query attention with separate q/k/v projections.
ModelSection llama_shape() {
  ModelSection m = gpt2_shape();
  m.position = PositionKind::kRope;
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.bias = false;
  m.tie_embeddings = false;
  m.n_kv_head = 2;
  m.fused_qkv = false;
  return m;
}

struct LossAndGrads {
  at::Tensor loss;                 // summed over the micro-batches
  std::vector<at::Tensor> grads;   // unique parameters, in order
};

// Two micro-batches (gradients accumulate), as a training step does. With backward_outside_autocast
// the backward runs after autocast was switched off (the recompute must restore the forward's).
LossAndGrads loss_and_grads(model::Gpt& gpt, c10::ScalarType autocast_dtype, bool backward_outside_autocast = false) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const int64_t V = gpt.config().vocab_size, T = gpt.config().seq_len;
  gpt.zero_grad();
  at::Tensor total = at::zeros({});
  for (int micro = 0; micro < 2; ++micro) {
    const at::Tensor tokens = at::randint(V, {3, T + 1}, gen, at::kLong);
    at::Tensor loss;
    {
      compat::AutocastGuard autocast(at::kCPU, autocast_dtype);
      loss = model::Gpt::loss(gpt.forward(tokens.narrow(1, 0, T)), tokens.narrow(1, 1, T));
      if (!backward_outside_autocast) loss.backward();
    }
    if (backward_outside_autocast) loss.backward();
    total += loss.detach();
  }
  LossAndGrads r{total, {}};
  for (const auto& p : gpt.unique_named_parameters()) {
    INFO(p.first);
    REQUIRE(p.second.grad().defined());  // every parameter, also inside the recomputed parts
    r.grads.push_back(p.second.grad().clone());
  }
  return r;
}

void require_identical(const LossAndGrads& a, const LossAndGrads& b, const model::Gpt& gpt) {
  REQUIRE(at::equal(a.loss, b.loss));
  const auto named = gpt.unique_named_parameters();
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO(named[i].first);
    REQUIRE(at::equal(a.grads[i], b.grads[i]));
  }
}

struct MemoryUse {
  int64_t saved;  // bytes allocated by the forward and still alive before the backward
  int64_t peak;   // the most bytes alive during forward + backward
};

MemoryUse memory_use(model::Gpt& gpt, const at::Tensor& tokens) {
  const int64_t T = gpt.config().seq_len;
  gpt.zero_grad();
  auto probe = std::make_shared<test::CpuMemoryProbe>();
  MemoryUse use{};
  {
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, probe);
    at::Tensor loss = model::Gpt::loss(gpt.forward(tokens.narrow(1, 0, T)), tokens.narrow(1, 1, T));
    use.saved = probe->live();
    loss.backward();
    use.peak = probe->peak();
  }
  return use;
}

}  // namespace

TEST_CASE("recompute: every mode gives the loss and gradients of none, bit for bit (fp32, CPU)", "[model]") {
  const bool llama = GENERATE(false, true);
  const Recompute mode = GENERATE(Recompute::kAttention, Recompute::kMlp, Recompute::kBlock);
  INFO((llama ? "llama" : "gpt2") << " shape, recompute " << static_cast<int>(mode));
  torch::manual_seed(3);
  model::Gpt gpt(llama ? llama_shape() : gpt2_shape());
  const LossAndGrads reference = loss_and_grads(gpt, at::kFloat);
  gpt.set_recompute(mode);
  REQUIRE(gpt.recompute() == mode);
  require_identical(reference, loss_and_grads(gpt, at::kFloat), gpt);
}

TEST_CASE("recompute: bf16 autocast, also with the backward outside autocast, matches none bit for bit", "[model]") {
  // Covers the two autocast hazards: the recompute on another autocast state than the forward's,
  // and a weight cast cached by the grad-free first pass (the weight would get no gradient).
  // Every mode: the MLP's part takes the attention's output in bf16 (it starts with the add).
  const bool outside = GENERATE(false, true);
  const Recompute mode = GENERATE(Recompute::kAttention, Recompute::kMlp, Recompute::kBlock);
  INFO("backward outside autocast: " << outside << ", recompute " << static_cast<int>(mode));
  torch::manual_seed(4);
  model::Gpt gpt(llama_shape());
  const LossAndGrads reference = loss_and_grads(gpt, at::kBFloat16, outside);
  gpt.set_recompute(mode);
  require_identical(reference, loss_and_grads(gpt, at::kBFloat16, outside), gpt);
}

TEST_CASE("recompute: evaluation and grad-free forwards run the model plainly", "[model]") {
  torch::manual_seed(5);
  model::Gpt gpt(gpt2_shape());
  const at::Tensor idx = at::randint(50, {2, 16}, at::kLong);
  gpt.eval();
  const at::Tensor plain = gpt.forward(idx);
  gpt.set_recompute(Recompute::kBlock);
  const at::Tensor eval = gpt.forward(idx);
  REQUIRE(at::equal(plain, eval));
  gpt.train();
  {
    torch::NoGradGuard no_grad;
    REQUIRE(at::equal(plain, gpt.forward(idx)));
  }
  // The first pass puts the block in eval mode only for its duration.
  const at::Tensor trained = gpt.forward(idx);
  REQUIRE(at::equal(plain, trained));
  for (const auto& b : gpt.blocks) REQUIRE(b->is_training());
}

TEST_CASE("recompute: a part whose inputs need no gradient runs plainly", "[model]") {
  torch::nn::Linear layer(4, 4);
  const at::Tensor x = at::randn({2, 4});  // no gradient wanted for x, but for the weight
  const at::Tensor y = model::recompute_in_backward(
      *layer, [&](const std::vector<at::Tensor>& in) { return layer->forward(in[0]); }, {x});
  // Without an input requiring grad a recompute node could not pass the weight gradient on, so the
  // part was recorded as usual.
  y.sum().backward();
  REQUIRE(layer->weight.grad().defined());
}

TEST_CASE("recompute: fewer activation bytes are kept between forward and backward", "[model]") {
  // fp32, 4 blocks, d = 64, 4 x 64 tokens. What none keeps per token and block: the norms' inputs
  // and outputs, q/k/v (with RoPE the rotated q and k), the attention output and log-sum-exp
  // (LibTorch's CPU attention is a flash kernel: no T x T matrix), c_proj's input, c_fc's and the
  // activation's outputs. attention drops all of ln_1 .. c_proj but x (about 6d floats), mlp all
  // of ln_2 .. c_proj but h (about 9d with GELU, 18d with SwiGLU), block all but its input.
  const bool llama = GENERATE(false, true);
  INFO((llama ? "llama" : "gpt2") << " shape");
  ModelSection m = llama ? llama_shape() : gpt2_shape();
  m.vocab_size = 64;
  m.seq_len = 64;
  m.n_layer = 4;
  m.d_model = 64;
  torch::manual_seed(6);
  model::Gpt gpt(m);
  const at::Tensor tokens = at::randint(64, {4, 65}, at::kLong);
  std::vector<MemoryUse> use;
  for (Recompute mode : {Recompute::kNone, Recompute::kAttention, Recompute::kMlp, Recompute::kBlock}) {
    gpt.set_recompute(mode);
    use.push_back(memory_use(gpt, tokens));
    WARN((llama ? "llama" : "gpt2") << " recompute " << static_cast<int>(mode) << ": kept " << use.back().saved
                                    << " B after the forward, peak " << use.back().peak << " B");
  }
  const MemoryUse &none = use[0], &attention = use[1], &mlp = use[2], &block = use[3];
  const int64_t floats_per_d = 4 * 64 * 4 * 64 * 4;  // bytes of d floats per token and block
  CHECK(none.saved - attention.saved > 4 * floats_per_d);
  CHECK(none.saved - mlp.saved > 8 * floats_per_d);
  CHECK(mlp.saved < attention.saved);
  CHECK(block.saved < mlp.saved);
  // Block mode keeps the block inputs (d floats per token and block) and what lies outside the
  // blocks (embeddings, ln_f, head, loss), which every mode keeps alike.
  CHECK(none.saved - block.saved > 10 * floats_per_d);
  CHECK(attention.peak < none.peak);
  CHECK(mlp.peak < none.peak);
  CHECK(block.peak < mlp.peak);
}

TEST_CASE("recompute: model.dropout > 0 is refused, naming both keys", "[model]") {
  const std::string msg =
      config::testing::bad_yaml_message("model:\n  dropout: 0.1\ntrain:\n  recompute: mlp\n");
  CHECK_THAT(msg, FP8T_CONTAINS("train.recompute (test.yaml:4) = mlp"));
  CHECK_THAT(msg, FP8T_CONTAINS("model.dropout (test.yaml:2) = 0.1"));
  // Without dropout every mode is accepted.
  CHECK_NOTHROW(config::testing::from_yaml("train:\n  recompute: block\n"));
}
