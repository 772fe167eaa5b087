// Two copies of one model, rewritten to FP8 from one seed and trained side by side
// (tests/fp8/layers/test_fp8_activation.cpp: GELU, tests/fp8/backends/test_swiglu.cpp: SwiGLU): a
// change that moves work between kernels must leave the training bit for bit as it was.
#pragma once

#include <torch/torch.h>  // torch::manual_seed, torch::randint

#include <memory>  // std::shared_ptr

#include "lib/fp8/rewrite.h"  // rewrite_to_fp8, RewriteResult
#include "lib/model/gpt.h"    // Gpt
#include "tests/catch.h"

namespace fp8t {
namespace test {

// `plain` has its MLP activations put back as the model's own `plain_act`, so its Linears cast the
// activation's output and gradient themselves; a test may instead put another fused activation there.
struct Twins {
  std::shared_ptr<model::Gpt> fused, plain;
  fp8::RewriteResult fused_rw, plain_rw;
  Twins(const ModelSection& cfg, const fp8::Recipe& recipe, const at::Device& device,
        model::Activation::Kind plain_act) {
    torch::manual_seed(21);
    fused = std::make_shared<model::Gpt>(cfg);
    torch::manual_seed(21);
    plain = std::make_shared<model::Gpt>(cfg);
    fused->to(device);
    plain->to(device);
    fused_rw = fp8::rewrite_to_fp8(*fused, recipe, device);
    plain_rw = fp8::rewrite_to_fp8(*plain, recipe, device);
    for (auto& b : plain->blocks) b->mlp->replace_slot("act", std::make_shared<model::Activation>(plain_act));
  }
};

// The loss of the first 16 tokens of each row of idx predicting the next, after its backward.
inline at::Tensor loss_and_backward(model::Gpt& gpt, const at::Tensor& idx) {
  const at::Tensor loss = model::Gpt::loss(gpt.forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
  loss.backward();
  return loss.detach();
}

// Trains both twins 3 steps on the same batches (vocabulary 64, 3 x 17 tokens, on `device`): the
// loss and every gradient must agree bit for bit, and with recipe_state also the amax history and
// the scales, with real scales (not 1) in use by the end.
inline void train_side_by_side(Twins& t, const at::Device& device, bool recipe_state) {
  torch::manual_seed(4);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const at::Tensor idx = torch::randint(0, 64, {3, 17}).to(device);
    const at::Tensor lf = loss_and_backward(*t.fused, idx), lp = loss_and_backward(*t.plain, idx);
    REQUIRE(at::equal(lf, lp));
    const auto pp = t.plain->named_parameters();
    for (const auto& item : t.fused->named_parameters()) {
      INFO(item.key());
      REQUIRE(at::equal(item.value().grad(), pp[item.key()].grad()));
    }
    if (recipe_state) {
      REQUIRE(at::equal(t.fused_rw.scaling->amax_history(), t.plain_rw.scaling->amax_history()));
      REQUIRE(at::equal(t.fused_rw.scaling->scale(), t.plain_rw.scaling->scale()));
    }
    t.fused_rw.scaling->update();
    t.plain_rw.scaling->update();
    t.fused->zero_grad();
    t.plain->zero_grad();
  }
  if (recipe_state) REQUIRE(t.fused_rw.scaling->scale().ne(1.0).any().item<bool>());
}

}  // namespace test
}  // namespace fp8t
