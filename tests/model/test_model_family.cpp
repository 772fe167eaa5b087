// lib/model/model.h: a second model family, known only to this test, implements model::Model and
// is driven by the parts that take the interface: the FP8 rewrite (its slots, its recompute
// setting), the Session (a training step on the CPU) and ZeRO-3 (its units, on two ranks).
#include "lib/model/model.h"

#include <torch/torch.h>  // torch::nn::Embedding, torch::manual_seed

#include <cctype>  // std::isdigit
#include <cmath>   // std::abs, std::isfinite
#include <map>     // std::map
#include <memory>  // std::shared_ptr
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/dist/communicator.h"      // dist::Communicator
#include "lib/dist/fully_sharded.h"     // dist::FullyShardedModel
#include "lib/fp8/layers/fp8_linear.h"  // fp8::Fp8Linear
#include "lib/fp8/rewrite.h"            // fp8::rewrite_to_fp8
#include "lib/step/session.h"           // step::Session
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"  // run_ranks

using namespace fp8t;

namespace {

constexpr int64_t kVocab = 64, kDim = 32, kSeq = 16;

// A residual MLP block without attention: x + proj(gelu(fc(norm(x)))).
class MlpBlock : public model::SlotModule {
 public:
  MlpBlock() {
    add_slot("norm", std::make_shared<model::Norm>(model::Norm::Kind::kRMSNorm, kDim, 1e-5, false), &norm, "fc");
    add_slot("fc", std::make_shared<model::Linear>(kDim, 4 * kDim, false), &fc);
    add_slot("act", std::make_shared<model::Activation>(model::Activation::Kind::kGeluTanh), &act, "proj", "fc");
    add_slot("proj", std::make_shared<model::Linear>(4 * kDim, kDim, false), &proj);
  }
  at::Tensor forward(const at::Tensor& x) { return x + proj->forward(act->forward(fc->forward(norm->forward(x)))); }
  std::shared_ptr<model::UnaryModule> norm, fc, act, proj;
};

// The test's family: token embedding (unit 0), two MLP blocks "b0", "b1" (units 1, 2), a final
// norm and an untied head (unit 3). It counts the calls the trainer makes.
class MlpFamily : public model::Model {
 public:
  MlpFamily() {
    wte = register_module("wte", torch::nn::Embedding(kVocab, kDim));
    for (int i = 0; i < 2; ++i) {
      const std::string name = std::string("b").append(std::to_string(i));  // (no GCC 12 stringop false positive)
      blocks.push_back(register_module(name, std::make_shared<MlpBlock>()));
    }
    add_slot("ln_f", std::make_shared<model::Norm>(model::Norm::Kind::kRMSNorm, kDim, 1e-5, false), &ln_f, "lm_head");
    add_slot("lm_head", std::make_shared<model::Linear>(kDim, kVocab, false), &lm_head);
  }
  at::Tensor forward(const at::Tensor& idx) override { return leave(head(), lm_head->forward(hidden(idx))); }
  at::Tensor hidden(const at::Tensor& idx) override {
    ++hidden_calls;
    enter(0);
    at::Tensor x = leave(0, wte->forward(idx));
    for (size_t i = 0; i < blocks.size(); ++i) {
      enter(static_cast<int>(i) + 1);
      x = leave(static_cast<int>(i) + 1, blocks[i]->forward(x));
    }
    enter(head());
    return ln_f->forward(x);
  }
  at::Tensor head_loss(const at::Tensor& h, const at::Tensor& targets) override {
    ++head_loss_calls;
    return leave(head(), loss(lm_head->forward(h), targets));
  }
  void set_recompute(Recompute mode) override { recompute_ = mode; }
  Recompute recompute() const override { return recompute_; }
  void set_loss_chunk_bytes(int64_t bytes) override { loss_chunk_bytes = bytes; }
  double flops_per_token() const override { return 6.0 * static_cast<double>(parameter_count() - kVocab * kDim); }
  int num_units() const override { return head() + 1; }
  int unit_of(const std::string& parameter) const override {
    if (parameter.rfind("wte.", 0) == 0) return 0;
    if (parameter[0] == 'b' && std::isdigit(static_cast<unsigned char>(parameter[1]))) return parameter[1] - '0' + 1;
    return head();
  }
  void set_unit_hooks(std::shared_ptr<model::UnitHooks> hooks) override { hooks_ = std::move(hooks); }

  torch::nn::Embedding wte{nullptr};
  std::vector<std::shared_ptr<MlpBlock>> blocks;
  std::shared_ptr<model::UnaryModule> ln_f, lm_head;
  int hidden_calls = 0, head_loss_calls = 0;
  int64_t loss_chunk_bytes = 0;

 private:
  int head() const { return static_cast<int>(blocks.size()) + 1; }
  void enter(int unit) {
    if (hooks_) hooks_->before_forward(unit);
  }
  at::Tensor leave(int unit, const at::Tensor& out) { return hooks_ ? hooks_->after_forward(unit, {out}).at(0) : out; }
  Recompute recompute_ = Recompute::kNone;
  std::shared_ptr<model::UnitHooks> hooks_;
};

data::Batch batch_of(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor t = at::randint(kVocab, {4, kSeq + 1}, gen, at::kLong);
  return {t.narrow(1, 0, kSeq).contiguous(), t.narrow(1, 1, kSeq).contiguous()};
}

// A config whose model section matches the family's sizes (it only sizes the estimates).
ExperimentConfig family_config(Precision precision) {
  ExperimentConfig c;
  c.precision = precision;
  c.model.n_layer = 2;
  c.model.d_model = kDim;
  c.model.n_head = 2;
  c.model.seq_len = kSeq;
  c.model.vocab_size = kVocab;
  c.train.micro_batch_size = 4;
  c.train.grad_accum_steps = 2;
  return c;
}

}  // namespace

TEST_CASE("model family: the FP8 rewrite converts a second family's slots and reads its recompute", "[model]") {
  torch::manual_seed(1);
  auto family = std::make_shared<MlpFamily>();
  family->set_recompute(Recompute::kCasts);  // the rewrite asks the model, not a Gpt
  fp8::Recipe recipe;
  recipe.skip_layers = {};
  const fp8::RewriteResult rw = fp8::rewrite_to_fp8(*family, recipe, at::kCPU);
  // 2 blocks x (fc, proj) + lm_head; each block's norm and ln_f feed an FP8 Linear; each GELU sits
  // between two.
  CHECK(rw.report.converted_linears == 5);
  CHECK(rw.report.converted_norms == 3);
  CHECK(rw.report.fused_activations == 2);
  CHECK(std::dynamic_pointer_cast<fp8::Fp8Linear>(family->blocks[1]->fc) != nullptr);
  CHECK(std::dynamic_pointer_cast<fp8::Fp8Linear>(family->lm_head) != nullptr);
  int deferred = 0;
  for (const auto& d : rw.report.layers) deferred += d.reason.find("W^T transposed in dgrad") != std::string::npos;
  CHECK(deferred == 5);  // train.recompute casts reached every converted Linear
  const data::Batch b = batch_of(3);
  CHECK(std::isfinite(family->forward_loss(b.inputs, b.targets).item<double>()));
}

TEST_CASE("model family: a Session trains a second family on the CPU", "[model]") {
  const Precision precision = GENERATE(Precision::kFp32, Precision::kFp8);
  INFO("fp8 " << (precision == Precision::kFp8));
  torch::manual_seed(2);
  auto family = std::make_shared<MlpFamily>();
  ExperimentConfig cfg = family_config(precision);
  cfg.train.loss_chunk_mib = 3;
  step::Session session(cfg, at::Device(at::kCPU), family);
  REQUIRE(&session.model() == family.get());
  CHECK(family->loss_chunk_bytes == int64_t{3} << 20);  // the trainer's settings reach the family
  CHECK(session.parameters().size() == family->unique_named_parameters().size());
  if (precision == Precision::kFp8) {
    REQUIRE(session.rewrite() != nullptr);
    CHECK(session.rewrite()->converted_linears == 4);  // fc and proj of both blocks (lm_head skipped)
    CHECK(std::dynamic_pointer_cast<fp8::Fp8Linear>(family->blocks[0]->proj) != nullptr);
  }
  session.prepare_training(nullptr);
  const data::Batch batch = batch_of(5);
  std::vector<double> losses;
  for (int step = 1; step <= 4; ++step) {
    at::Tensor loss_sum = at::zeros({});
    session.step([&] { return batch; }, 1e-2, loss_sum, {}, step);
    losses.push_back(loss_sum.item<double>() / 2);
  }
  CHECK(family->hidden_calls == 8);  // 4 steps x 2 micro-batches, through the interface
  CHECK(family->head_loss_calls == 8);
  // One batch, four AdamW steps at 1e-2: the loss must fall (ln 64 = 4.16 at the start).
  CHECK(losses.back() < losses.front() - 0.05);
}

TEST_CASE("model family: ZeRO-3 shards a second family by its units", "[model]") {
  constexpr int kWorld = 2;
  struct RankResult {
    int units = 0;
    double loss = 0, reference_loss = 0;
    std::map<std::string, at::Tensor> gathered;
    std::vector<dist::FullyShardedModel::Segment> segments;
  };
  std::vector<RankResult> results(kWorld);
  std::map<std::string, at::Tensor> start, mean_grad;  // the starting weights; the ranks' mean gradient
  {
    torch::manual_seed(4);
    MlpFamily reference;
    for (const auto& [name, p] : reference.unique_named_parameters()) start[name] = p.detach().clone();
    for (int r = 0; r < kWorld; ++r) {
      const data::Batch b = batch_of(10 + r);
      reference.forward_loss(b.inputs, b.targets).backward();
    }
    for (const auto& [name, p] : reference.unique_named_parameters()) mean_grad[name] = p.grad() / kWorld;
  }
  test::run_ranks(kWorld, std::chrono::seconds(60), [&](int rank, dist::Communicator& comm) {
    auto family = std::make_shared<MlpFamily>();
    {
      torch::NoGradGuard no_grad;
      for (const auto& [name, p] : family->unique_named_parameters()) p.copy_(start.at(name));
    }
    auto sharded = std::make_shared<dist::FullyShardedModel>(
        std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {}), *family, nullptr,
        dist::FullyShardedModel::Options{});
    family->set_unit_hooks(sharded);
    RankResult& out = results[rank];
    out.units = sharded->num_units();
    const data::Batch b = batch_of(10 + rank);
    const at::Tensor loss = family->forward_loss(b.inputs, b.targets);
    out.loss = loss.item<double>();
    loss.backward();
    sharded->finish();
    out.segments = sharded->segments();
    for (auto& [name, t] : sharded->gather_full_parameters()) out.gathered[name] = t;
    family->set_unit_hooks(nullptr);
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(results[r].units == 4);
    // The gathered weights are the starting ones, bit for bit (FP32 copies, no arithmetic).
    REQUIRE(results[r].gathered.size() == start.size());
    for (const auto& [name, w] : start) CHECK(at::equal(results[r].gathered.at(name), w));
  }
  // Each rank's loss on its batch is the unsharded model's: the same FP32 ops on gathered copies
  // (1e-6 relative: room for a BLAS kernel's last bits on differently aligned buffers).
  for (int r = 0; r < kWorld; ++r) {
    torch::NoGradGuard no_grad;
    MlpFamily reference;
    for (const auto& [name, p] : reference.unique_named_parameters()) p.copy_(start.at(name));
    const data::Batch b = batch_of(10 + r);
    const double want = reference.forward_loss(b.inputs, b.targets).item<double>();
    CHECK(std::abs(results[r].loss - want) <= 1e-6 * want);
  }
  // Every parameter's element is owned by exactly one rank, and its gradient there is the mean of
  // the two ranks' gradients. Tolerance 1e-6 relative and 1e-7 absolute (the gradients are
  // ~1e-3 to 1e-1): the reduce-scatter sums the two in FP32 as the reference's .grad does, and
  // only a BLAS kernel's last bits may differ.
  std::map<std::string, int64_t> covered;
  for (const RankResult& r : results) {
    for (const auto& seg : r.segments) {
      covered[seg.name] += seg.length;
      const at::Tensor want = mean_grad.at(seg.name).reshape(-1).narrow(0, seg.begin, seg.length);
      INFO(seg.name << " [" << seg.begin << ", +" << seg.length << ")");
      CHECK(at::allclose(seg.grad.reshape(-1), want, /*rtol=*/1e-6, /*atol=*/1e-7));
    }
  }
  for (const auto& [name, w] : start) CHECK(covered[name] == w.numel());
}
