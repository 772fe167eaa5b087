// lib/step/step_health.*: the device-side found_inf flag and skip counters, and the consumers
// that honour it (AdamW, the FP8 delayed scaling, Session::step).
#include "lib/step/step_health.h"

#include <cmath>  // std::nan

#include <torch/torch.h>  // torch::NoGradGuard

#include "lib/fp8/recipes/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/optim/optimizer.h"              // AdamW
#include "lib/step/session.h"                 // Session
#include "tests/catch.h"

using namespace fp8t;
using fp8t::step::StepHealth;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

at::Tensor scalar(float v) { return at::full({}, v); }

}  // namespace

TEST_CASE("step health: producers OR into the flag; counters track streaks", "[step]") {
  StepHealth h(at::Device(at::kCPU), 3);
  h.begin_step();
  h.flag_non_finite(at::ones({4}));
  h.flag(at::zeros({}));
  REQUIRE(h.found_inf().item<float>() == 0.0f);
  h.end_step(1);
  // Skips at steps 2 and 3, an applied step 4, then skips from 5: diverged at 5 after three.
  const std::vector<bool> skip = {true, true, false, true, true, true, true};
  for (size_t i = 0; i < skip.size(); ++i) {
    h.begin_step();
    h.flag_non_finite(at::ones({2}));
    if (skip[i]) h.flag_non_finite(i % 2 ? scalar(std::nanf("")) : at::tensor({1.0f, -kInf}));
    h.flag(scalar(0.0f));  // a later producer does not clear an earlier one
    REQUIRE(h.found_inf().item<float>() == (skip[i] ? 1.0f : 0.0f));
    h.end_step(static_cast<int64_t>(i) + 2);
  }
  const StepHealth::Counts c = h.read();
  CHECK(c.skipped == 6);
  CHECK(c.consecutive == 4);
  CHECK(c.streak_start == 5);
  CHECK(c.diverged_at == 5);
  // A loss scaler's found-inf tensor (non-zero = found) is a producer too.
  h.begin_step();
  h.flag(at::tensor({0.0f, 1.0f}));
  CHECK(h.found_inf().item<float>() == 1.0f);
  CHECK(h.unless_skipped(scalar(std::nanf(""))).item<float>() == 0.0f);
  h.restore_skipped(9);
  CHECK(h.read().skipped == 9);
  CHECK(h.read().consecutive == 0);
}

TEST_CASE("step health: AdamW with found_inf = 1 changes nothing, 0 steps normally", "[step]") {
  at::Tensor w = at::randn({3, 4}).set_requires_grad(true);
  optim::AdamW opt({{"w", w}}, optim::AdamWOptions{});
  w.mutable_grad() = at::full({3, 4}, std::nanf(""));
  const at::Tensor before = w.detach().clone();
  opt.step(1e-2, at::Tensor(), scalar(1.0f));
  REQUIRE(at::equal(before, w.detach()));
  const auto state = opt.state_dict();
  REQUIRE(state.at("w.step").item<float>() == 0.0f);
  REQUIRE(state.at("w.exp_avg").abs().sum().item<float>() == 0.0f);
  w.mutable_grad() = at::ones({3, 4});
  opt.step(1e-2, at::Tensor(), scalar(0.0f));
  REQUIRE(opt.state_dict().at("w.step").item<float>() == 1.0f);
  REQUIRE(!at::equal(before, w.detach()));
}

TEST_CASE("step health: a skipped FP8 update keeps history and scales and drops the step's amax", "[step]") {
  fp8::Recipe r;
  r.amax_history_len = 3;
  fp8::DelayedScaling s(r);
  s.add_slot("a", fp8::Format::kE4M3);
  s.add_slot("b", fp8::Format::kE5M2);
  s.finalize(at::Device(at::kCPU));
  s.amax_history()[0].copy_(at::tensor({2.0f, 4.0f}));
  s.update(scalar(0.0f));  // applied: a normal update
  const at::Tensor history = s.amax_history().clone();
  const at::Tensor scale = s.scale().clone();
  const at::Tensor scale_inv = s.scale_inv().clone();
  REQUIRE(scale[0].item<float>() != 1.0f);
  s.amax_history()[0].copy_(at::tensor({kInf, std::nanf("")}));
  s.update(scalar(1.0f));
  CHECK(at::equal(s.amax_history(), history));  // row 0 (this step's inf/NaN) dropped, no roll
  CHECK(at::equal(s.scale(), scale));
  CHECK(at::equal(s.scale_inv(), scale_inv));
}

namespace {

// A poisoned step leaves weights, optimizer state, FP8 history and the loss sum as they were.
void check_session_skips(Precision precision, const at::Device& device);

}  // namespace

TEST_CASE("step health: a session skips a step with a non-finite loss entirely", "[step]") {
  const Precision precision = GENERATE(Precision::kFp32, Precision::kFp8);
  INFO("fp8 " << (precision == Precision::kFp8));
  check_session_skips(precision, at::Device(at::kCPU));
}

#if defined(FP8T_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>  // c10::cuda::warning_state (sync debug mode)

TEST_CASE("step health: on CUDA the skip is decided on the device, without a host sync", "[step][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const Precision precision = GENERATE(Precision::kFp32, Precision::kBf16, Precision::kFp8);
  INFO("precision " << static_cast<int>(precision));
  check_session_skips(precision, at::Device(at::kCUDA, 0));
}
#endif

namespace {

void check_session_skips(Precision precision, const at::Device& device) {
  ExperimentConfig c;
  c.precision = precision;
  c.model.n_layer = 1;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 8;
  c.train.micro_batch_size = 2;
  c.train.grad_accum_steps = 1;
  c.train.max_skipped_steps = 2;
  step::Session session(c, device);
  session.prepare_training(nullptr);
  const at::Tensor t = at::randint(64, {2, 9}, at::kLong);
  const data::Batch batch{t.narrow(1, 0, 8).contiguous(), t.narrow(1, 1, 8).contiguous()};
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  session.step([&] { return batch; }, 1e-3, loss_sum, {}, 1);
  REQUIRE(std::isfinite(loss_sum.item<float>()));

  // Poison the first parameter (the embedding): the loss and every gradient become NaN.
  at::Tensor w = session.parameters().front();
  {
    torch::NoGradGuard no_grad;
    w.fill_(std::nanf(""));
  }
  std::vector<at::Tensor> before;
  for (const auto& p : session.parameters()) before.push_back(p.detach().clone());
  const auto optim_before = session.optimizer().state_dict();
  at::Tensor history_before;
  if (session.scaling()) history_before = session.scaling()->amax_history().clone();
  const at::Tensor sum_before = loss_sum.clone();
#if defined(FP8T_WITH_CUDA)
  // On the GPU any host sync inside the two poisoned steps is an error.
  if (device.is_cuda()) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
#endif
  for (int64_t step = 2; step <= 3; ++step) session.step([&] { return batch; }, 1e-3, loss_sum, {}, step);
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
#endif

  for (size_t i = 0; i < before.size(); ++i) REQUIRE(at::equal(before[i], session.parameters()[i].detach()) == (i != 0));
  for (const auto& [k, v] : session.optimizer().state_dict()) REQUIRE(at::equal(v, optim_before.at(k)));
  if (session.scaling()) REQUIRE(at::equal(history_before, session.scaling()->amax_history()));
  REQUIRE(at::equal(loss_sum, sum_before));  // skipped losses stay out of the sum
  const step::StepHealth::Counts counts = session.health().read();
  CHECK(counts.skipped == 2);
  CHECK(counts.diverged_at == 2);
}

}  // namespace
