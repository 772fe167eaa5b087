// lib/step/weight_amax.*: under current scaling the FP8 weight casts take their scale from the
// amax AdamW wrote (no amax pass over the weight), with the bits of a run that makes the passes;
// a weight written by anything else falls back to its own pass; other recipes link nothing.
#include "lib/step/weight_amax.h"

#include <torch/torch.h>  // torch::NoGradGuard

#include <memory>  // std::shared_ptr
#include <vector>  // std::vector

#include "lib/fp8/layers/fp8_linear.h"  // fp8::Fp8Linear, fp8::KnownWeightAmax
#include "lib/model/gpt.h"              // model::Gpt
#include "lib/step/session.h"           // Session
#include "tests/catch.h"

using namespace fp8t;

namespace {

ExperimentConfig tiny_current() {
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  c.fp8.kind = fp8::RecipeKind::kCurrent;
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  c.train.micro_batch_size = 4;
  c.train.grad_accum_steps = 2;
  return c;
}

std::vector<fp8::Fp8Linear*> fp8_linears(step::Session& s) {
  std::vector<fp8::Fp8Linear*> out;
  for (const auto& m : s.model().modules(/*include_self=*/false)) {
    if (auto* l = dynamic_cast<fp8::Fp8Linear*>(m.get())) out.push_back(l);
  }
  return out;
}

// `steps` steps on fixed batches; returns the losses.
std::vector<float> train_steps(step::Session& s, int steps, uint64_t seed = 5) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto next = [&] {
    const at::Tensor t = at::randint(64, {4, 17}, gen, at::kLong);
    return data::Batch{t.narrow(1, 0, 16).contiguous(), t.narrow(1, 1, 16).contiguous()};
  };
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    at::Tensor loss_sum = at::zeros({});
    s.step(next, 1e-2, loss_sum);
    losses.push_back(loss_sum.item<float>());
  }
  return losses;
}

// The weight slot's recorded amax of a layer (current scaling: its last recorded cast).
float recorded_weight_amax(const step::Session& s, const fp8::Fp8Linear& l) {
  return s.scaling()->amax_history()[0][l.slot_weight()].item<float>();
}

}  // namespace

TEST_CASE("weight amax: current scaling's weight casts use AdamW's amax, with the bits of casts that make their own "
          "amax passes", "[step]") {
  step::Session linked(tiny_current(), at::Device(at::kCPU));
  linked.prepare_training(nullptr);
  step::Session passes(tiny_current(), at::Device(at::kCPU));
  passes.prepare_training(nullptr);
  const std::vector<fp8::Fp8Linear*> layers = fp8_linears(linked);
  REQUIRE(layers.size() == 8);  // 4 per block
  for (fp8::Fp8Linear* l : fp8_linears(passes)) l->set_known_weight_amax(nullptr);

  // Three steps: the first casts with amax passes (nothing written yet), the next two from AdamW's amaxes.
  CHECK(train_steps(linked, 3) == train_steps(passes, 3));
  const auto a = linked.model().named_parameters();
  const auto b = passes.model().named_parameters();
  for (const auto& item : a) {
    INFO(item.key());
    CHECK(at::equal(item.value(), b[item.key()]));
  }
  CHECK(at::equal(linked.scaling()->amax_history(), passes.scaling()->amax_history()));
  CHECK(at::equal(linked.scaling()->scale(), passes.scaling()->scale()));
  for (const fp8::Fp8Linear* l : layers) {
    INFO(l->layer_name());
    const auto& known = l->known_weight_amax();
    REQUIRE(known);
    CHECK(known->weight_version == static_cast<int64_t>(l->weight._version()));  // current
    const at::Tensor w = l->weight.detach().abs();
    CHECK(known->amax.item<float>() == w.max().item<float>());
  }
}

TEST_CASE("weight amax: the cast reads the amax AdamW left while the weight is as it wrote it, and a weight written "
          "since makes its own amax pass", "[step]") {
  step::Session s(tiny_current(), at::Device(at::kCPU));
  s.prepare_training(nullptr);
  train_steps(s, 1);
  fp8::Fp8Linear& layer = *fp8_linears(s).front();
  const std::shared_ptr<fp8::KnownWeightAmax> known = layer.known_weight_amax();
  REQUIRE(known);
  const float true_amax = layer.weight.detach().abs().max().item<float>();
  // A planted amax far above the weight's: the next step's cast takes it (and its cast, max-
  // accumulating the true amax, keeps the larger).
  known->amax.fill_(100.0f * true_amax);
  train_steps(s, 1, /*seed=*/6);
  CHECK(recorded_weight_amax(s, layer) == 100.0f * true_amax);

  // Anything else that writes the weight moves its version counter: the planted amax is not read.
  known->amax.fill_(100.0f * true_amax);
  {
    torch::NoGradGuard no_grad;
    layer.weight.mul_(0.5);  // what loading a checkpoint into it does to the counter
  }
  const float halved = layer.weight.detach().abs().max().item<float>();
  layer.weight_fp8(/*record=*/true, /*rowwise=*/true, /*columnwise=*/false);
  CHECK(recorded_weight_amax(s, layer) == halved);
}

TEST_CASE("weight amax: delayed and block scaling link nothing", "[step]") {
  const fp8::RecipeKind kind = GENERATE(fp8::RecipeKind::kDelayed, fp8::RecipeKind::kBlock);
  ExperimentConfig c = tiny_current();
  c.fp8.kind = kind;
  step::Session s(c, at::Device(at::kCPU));
  s.prepare_training(nullptr);
  for (const fp8::Fp8Linear* l : fp8_linears(s)) CHECK_FALSE(l->known_weight_amax());
}
