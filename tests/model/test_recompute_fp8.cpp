// train.recompute under precision fp8 (CPU emulation, through step::Session): every mode gives the
// losses, parameters, gradients, amax histories, scales and FP8 statistics of none, bit for bit,
// after two optimizer steps of two micro-batches, for the three recipes (delayed in both
// fp8.amax_update modes). The first pass of a recomputed part runs in eval mode and records
// nothing; the recompute records once, with the scales the first pass used (lib/model/recompute.h).
// activation and casts recompute no module, only FP8 copies (cast again from what the backward
// keeps anyway); casts is also checked to hold none of those copies between the passes.
#include <torch/torch.h>  // at::randint

#include <cmath>   // std::isfinite
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/layers/fp8_linear.h"     // fp8::Fp8Linear
#include "lib/fp8/rewrite.h"               // fp8::rewrite_to_fp8
#include "lib/fp8/recipes/scaling.h"       // fp8::Scaling (session.scaling())
#include "lib/model/gpt.h"                 // model::Gpt
#include "lib/step/session.h"              // step::Session
#include "tests/catch.h"
#include "tests/model/cpu_memory_probe.h"  // test::CpuMemoryProbe

using namespace fp8t;

namespace {

enum class Shape { kGpt2, kLlama, kGpt2WgradOverride };

struct Variant {
  Shape shape;
  fp8::RecipeKind recipe;
  fp8::AmaxUpdate update;
};

ExperimentConfig tiny_fp8(const Variant& v, Recompute mode) {
  const Shape shape = v.shape;
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  if (shape == Shape::kLlama) {  // RMSNorm -> c_attn and -> c_fc hand-overs, SwiGLU, RoPE, GQA
    c.model.position = PositionKind::kRope;
    c.model.norm = NormKind::kRMSNorm;
    c.model.activation = Activation::kSwiGLU;
    c.model.bias = false;
    c.model.tie_embeddings = false;
    c.model.n_kv_head = 1;
  }
  // The norms then hand over real outputs in training but carriers in eval mode (the first pass).
  if (shape == Shape::kGpt2WgradOverride) c.fp8.override_linear_precision.wgrad = true;
  c.train.micro_batch_size = 2;
  c.train.grad_accum_steps = 2;
  c.train.recompute = mode;
  c.fp8.kind = v.recipe;
  if (v.recipe == fp8::RecipeKind::kDelayed) {
    c.fp8.amax_history_len = 4;
    c.fp8.amax_update = v.update;
  }
  return c;
}

struct Snapshot {
  at::Tensor loss_sum;
  std::vector<at::Tensor> tensors;  // parameters, their gradients, amax history, scale, statistics
};

// Two steps with FP8 statistics on, then one more forward and backward whose gradients and
// recorded amaxes are kept.
Snapshot train_two_steps(const ExperimentConfig& cfg) {
  step::Session session(cfg, at::Device(at::kCPU));
  REQUIRE(session.model().recompute() == cfg.train.recompute);  // wired from train.recompute
  session.prepare_training(nullptr);
  auto& scaling = *session.scaling();
  scaling.set_collect_stats(true);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto next = [&] {
    const at::Tensor t = at::randint(64, {2, 17}, gen, at::kLong);
    return data::Batch{t.narrow(1, 0, 16).contiguous(), t.narrow(1, 1, 16).contiguous()};
  };
  Snapshot s{at::zeros({}), {}};
  for (int step = 0; step < 2; ++step) session.step(next, 1e-2, s.loss_sum);
  const data::Batch b = next();
  model::Gpt::loss(session.model().forward(b.inputs), b.targets).backward();
  for (const at::Tensor& p : session.parameters()) {
    s.tensors.push_back(p.detach().clone());
    s.tensors.push_back(p.grad().clone());
  }
  s.tensors.push_back(scaling.amax_history().clone());
  s.tensors.push_back(scaling.scale().clone());
  for (const auto& st : scaling.read_stats()) {
    s.tensors.push_back(at::tensor({st.amax, st.scale, st.saturated, st.underflow}));
  }
  return s;
}

}  // namespace

TEST_CASE("recompute fp8: every mode matches none bit for bit (grads, amax history, scales, stats)", "[model]") {
  using fp8::AmaxUpdate;
  using fp8::RecipeKind;
  const Variant v = GENERATE(Variant{Shape::kGpt2, RecipeKind::kDelayed, AmaxUpdate::kStep},
                             Variant{Shape::kGpt2, RecipeKind::kDelayed, AmaxUpdate::kMicrobatch},
                             Variant{Shape::kLlama, RecipeKind::kDelayed, AmaxUpdate::kStep},
                             Variant{Shape::kLlama, RecipeKind::kDelayed, AmaxUpdate::kMicrobatch},
                             Variant{Shape::kGpt2WgradOverride, RecipeKind::kDelayed, AmaxUpdate::kStep},
                             Variant{Shape::kGpt2, RecipeKind::kCurrent, AmaxUpdate::kStep},
                             Variant{Shape::kLlama, RecipeKind::kCurrent, AmaxUpdate::kStep},
                             Variant{Shape::kGpt2, RecipeKind::kBlock, AmaxUpdate::kStep},
                             Variant{Shape::kLlama, RecipeKind::kBlock, AmaxUpdate::kStep});
  INFO("shape " << static_cast<int>(v.shape) << ", recipe " << fp8::to_string(v.recipe) << ", amax_update "
                << fp8::to_string(v.update));
  const Snapshot reference = train_two_steps(tiny_fp8(v, Recompute::kNone));
  REQUIRE(std::isfinite(reference.loss_sum.item<double>()));
  for (Recompute mode :
       {Recompute::kActivation, Recompute::kCasts, Recompute::kAttention, Recompute::kMlp, Recompute::kBlock}) {
    INFO("recompute " << static_cast<int>(mode));
    const Snapshot s = train_two_steps(tiny_fp8(v, mode));
    REQUIRE(at::equal(s.loss_sum, reference.loss_sum));
    REQUIRE(s.tensors.size() == reference.tensors.size());
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      INFO("tensor " << i << " of " << s.tensors.size());
      REQUIRE(at::equal(s.tensors[i], reference.tensors[i]));
    }
  }
}

namespace {

// The GPT-2 shape of tiny_fp8 with 3 sequences of 16 tokens, rewritten under `mode`.
struct CastsModel {
  std::shared_ptr<model::Gpt> gpt;
  fp8::RewriteResult rw;
  CastsModel(fp8::RecipeKind recipe, Recompute mode) {
    const ExperimentConfig c = tiny_fp8(Variant{Shape::kGpt2, recipe, fp8::AmaxUpdate::kStep}, mode);
    torch::manual_seed(5);
    gpt = std::make_shared<model::Gpt>(c.model);
    gpt->set_recompute(mode);
    rw = fp8::rewrite_to_fp8(*gpt, c.fp8, at::kCPU);
  }
  std::vector<std::shared_ptr<fp8::Fp8Linear>> linears(bool attn_c_proj_only) const {
    std::vector<std::shared_ptr<fp8::Fp8Linear>> out;
    for (const auto& b : gpt->blocks) {
      out.push_back(std::dynamic_pointer_cast<fp8::Fp8Linear>(b->attn->c_proj));
      if (attn_c_proj_only) continue;
      out.push_back(std::dynamic_pointer_cast<fp8::Fp8Linear>(b->attn->c_attn));
      out.push_back(std::dynamic_pointer_cast<fp8::Fp8Linear>(b->dense_mlp()->c_fc));
      out.push_back(std::dynamic_pointer_cast<fp8::Fp8Linear>(b->dense_mlp()->c_proj));
    }
    for (const auto& l : out) REQUIRE(l != nullptr);
    return out;
  }
  // The bytes a training forward allocates and still holds at the loss (the weight caches were
  // filled by a first forward and backward, so they are not among them).
  int64_t held_by_forward(const at::Tensor& idx) {
    model::Gpt::loss(gpt->forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16)).backward();
    auto probe = std::make_shared<test::CpuMemoryProbe>();
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, probe);
    const at::Tensor loss = model::Gpt::loss(gpt->forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
    return probe->live();
  }
};

}  // namespace

TEST_CASE("recompute casts: no columnwise copy of a weight or of attention's c_proj input is held (CPU)",
          "[model]") {
  using fp8::RecipeKind;
  const RecipeKind recipe = GENERATE(RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock);
  INFO("recipe " << fp8::to_string(recipe));
  const at::Tensor idx = at::randint(64, {3, 17}, at::make_generator<at::CPUGeneratorImpl>(3), at::kLong);
  CastsModel casts(recipe, Recompute::kCasts), activation(recipe, Recompute::kActivation);
  // The rewrite's decisions: every Linear transposes its weight in dgrad; only attention's c_proj
  // (whose input attention keeps) casts its wgrad copy again.
  for (const auto& l : casts.linears(false)) {
    INFO(l->layer_name());
    CHECK(l->transposes_weight());
    CHECK(l->recasts_input_columnwise() == (l->layer_name().find("attn.c_proj") != std::string::npos));
  }
  for (const auto& l : activation.linears(false)) {
    CHECK_FALSE((l->transposes_weight() || l->recasts_input_columnwise()));
  }
  CHECK(casts.rw.report.to_string().find("x^T cast again in the backward") != std::string::npos);

  const int64_t held_casts = casts.held_by_forward(idx), held_activation = activation.held_by_forward(idx);
  // The weight caches after a training forward: the rowwise copy alone under casts, both layouts
  // otherwise (the check that could fail).
  for (const auto& l : casts.linears(false)) {
    INFO(l->layer_name());
    CHECK(l->cached_weight().rowwise.defined());
    CHECK_FALSE(l->cached_weight().columnwise.defined());
  }
  for (const auto& l : activation.linears(false)) CHECK(l->cached_weight().columnwise.defined());
  // attention's c_proj input copies: 2 layers x [32, 48] codes (1 byte each) and their scale_inv
  // (a float per copy under the per-tensor recipes; a [32, 1] grid padded to 48 rows under block,
  // the current recipe keeping a float for its recast's scale instead): no other difference.
  const int64_t copies = 2 * 32 * 48;
  CAPTURE(held_casts, held_activation);
  CHECK(held_activation - held_casts >= copies - 2 * 4);
  CHECK(held_activation - held_casts <= copies + 2 * 48 * 4);
}
