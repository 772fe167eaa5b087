// lib/step/session.*: the model + FP8 rewrite + optimizer + one training step that training
// and `fp8train bench` share.
#include "lib/step/session.h"

#include <torch/torch.h>  // torch::NoGradGuard

#include <cstdlib>  // setenv, unsetenv
#include <string>   // std::string

#include "lib/fp8/recipes/delayed_scaling.h"  // DelayedScaling
#include "lib/model/gpt.h"                    // model::Gpt
#include "lib/optim/optimizer.h"              // AdamW
#include "lib/plan/resources.h"               // plan::estimate_training_memory
#include "lib/util/error.h"                   // fp8t::Error
#include "tests/catch.h"

using namespace fp8t;

namespace {

ExperimentConfig tiny(Precision precision) {
  ExperimentConfig c;
  c.precision = precision;
  c.model.n_layer = 1;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  c.train.micro_batch_size = 4;
  c.train.grad_accum_steps = 2;
  return c;
}

data::Batch fixed_batch() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor t = at::randint(64, {4, 17}, gen, at::kLong);
  return {t.narrow(1, 0, 16).contiguous(), t.narrow(1, 1, 16).contiguous()};
}

}  // namespace

TEST_CASE("session: steps lower the loss; phases are reported in order", "[step]") {
  const Precision precision = GENERATE(Precision::kFp32, Precision::kFp8);
  INFO("fp8 " << (precision == Precision::kFp8));
  step::Session session(tiny(precision), at::Device(at::kCPU));
  REQUIRE((session.scaling() != nullptr) == (precision == Precision::kFp8));
  REQUIRE((session.rewrite_report().empty()) == (precision != Precision::kFp8));
  REQUIRE_THROWS_AS(session.optimizer(), Error);  // not prepared yet
  session.prepare_training(nullptr);
  REQUIRE_THROWS_AS(session.prepare_training(nullptr), Error);

  const data::Batch batch = fixed_batch();
  int draws = 0;
  auto next = [&] {
    ++draws;
    return batch;
  };
  std::vector<std::string> phases;
  at::Tensor loss_sum = at::zeros({});
  session.step(next, 3e-3, loss_sum, [&](const char* name) { phases.emplace_back(name); });
  // Two micro-batches: forward, loss, backward twice, then the once-per-step phases.
  REQUIRE(draws == 2);
  REQUIRE(phases == std::vector<std::string>{"forward", "loss", "backward", "forward", "loss", "backward",
                                             "grad_sync", "clip", "fp8_update", "optimizer"});
  const double first = loss_sum.item<double>() / 2;
  for (int i = 0; i < 30; ++i) {
    loss_sum.zero_();
    session.step(next, 3e-3, loss_sum);
  }
  const double last = loss_sum.item<double>() / 2;
  REQUIRE(std::isfinite(last));
  REQUIRE(last < 0.8 * first);  // memorising one batch
  // The step left the gradients zeroed for the next one.
  for (const auto& p : session.parameters()) {
    REQUIRE((!p.grad().defined() || p.grad().abs().max().item<float>() == 0.0f));
  }
  if (auto* scaling = dynamic_cast<fp8::DelayedScaling*>(session.scaling())) {
    REQUIRE(scaling->update_count() == 31);  // one update per step
  }
}

TEST_CASE("session: evaluation neither trains nor touches the FP8 state", "[step]") {
  step::Session session(tiny(Precision::kFp8), at::Device(at::kCPU));
  session.prepare_training(nullptr);
  const data::Batch batch = fixed_batch();
  at::Tensor loss_sum = at::zeros({});
  session.step([&] { return batch; }, 3e-3, loss_sum);
  const at::Tensor history = session.scaling()->amax_history().clone();
  const at::Tensor weight = session.parameters().front().detach().clone();
  const at::Tensor a = session.eval_loss_sum([&](int64_t) { return batch; }, 3);
  const at::Tensor b = session.eval_loss_sum([&](int64_t) { return batch; }, 1);
  // A sum over the batches (1e-6 relative: float32 rounding of the three-term sum).
  REQUIRE(a.item<double>() == Approx(3 * b.item<double>()).epsilon(1e-6));
  REQUIRE(at::equal(history, session.scaling()->amax_history()));
  REQUIRE(at::equal(weight, session.parameters().front()));
  REQUIRE(session.model().is_training());  // back in training mode
}

TEST_CASE("session: an out-of-memory error estimates per rank of the layout the Session was given", "[step]") {
  // ZeRO-3 on rank 1 of 4: a quarter of the weights' state per rank, so the estimate differs
  // from one process alone's, and the message must carry this layout's.
  ExperimentConfig c = tiny(Precision::kFp32);
  c.dist.zero = ZeroStage::kFull;
  const ParallelLayout four = ParallelLayout::of(c.dist, 1, 4);
  const std::string per_rank_of_four = plan::estimate_training_memory(c, four).breakdown(c);
  REQUIRE(per_rank_of_four != plan::estimate_training_memory(c, ParallelLayout::of(c.dist)).breakdown(c));
  ::setenv("FP8TRAIN_TEST_OOM", "build", 1);
  std::string message;
  try {
    step::Session session(c, at::Device(at::kCPU), four);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    message = e.what();
  }
  ::unsetenv("FP8TRAIN_TEST_OOM");
  CHECK_THAT(message, FP8T_CONTAINS("out of memory while building the model"));
  CHECK_THAT(message, FP8T_CONTAINS(per_rank_of_four));

  // Without a communicator the layout stays the one given.
  c.dist.zero = ZeroStage::kNone;
  step::Session session(c, at::Device(at::kCPU), ParallelLayout::of(c.dist, 1, 4));
  session.prepare_training(nullptr);
  CHECK(session.layout().rank == 1);
  CHECK(session.layout().world_size == 4);
}
