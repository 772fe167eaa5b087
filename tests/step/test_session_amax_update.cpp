// lib/step/session.cpp with fp8.amax_update: the scale update per optimizer step (`step`) or
// after every micro-batch (`microbatch`, TransformerEngine's sequence), and the FP8 weight cast
// once per optimizer step in both modes (tests/fp8/recipes/test_te_parity.cpp checks the arithmetic).
#include <torch/torch.h>  // at::randint

#include <cmath>   // std::isfinite
#include <string>  // std::string

#include "lib/fp8/recipes/delayed_scaling.h"  // DelayedScaling
#include "lib/step/session.h"                 // Session
#include "tests/catch.h"

using namespace fp8t;

namespace {

constexpr int kMicroBatches = 3;

ExperimentConfig tiny_fp8(fp8::AmaxUpdate mode) {
  ExperimentConfig c;
  c.precision = Precision::kFp8;
  c.model.n_layer = 1;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  c.train.micro_batch_size = 4;
  c.train.grad_accum_steps = kMicroBatches;
  c.fp8.amax_history_len = 8;
  c.fp8.amax_update = mode;
  return c;
}

// Entries of slot j's history that hold an amax (one per update that rolled it).
int64_t recorded_rows(const fp8::DelayedScaling& ds, int j) {
  return (ds.amax_history().select(1, j) != 0).sum().item<int64_t>();
}

}  // namespace

TEST_CASE("session: fp8.amax_update step vs microbatch (updates, weight casts)", "[step]") {
  const fp8::AmaxUpdate mode = GENERATE(fp8::AmaxUpdate::kStep, fp8::AmaxUpdate::kMicrobatch);
  const bool per_micro = mode == fp8::AmaxUpdate::kMicrobatch;
  INFO("amax_update " << fp8::to_string(mode));
  step::Session session(tiny_fp8(mode), at::Device(at::kCPU));
  session.prepare_training(nullptr);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto next = [&] {
    const at::Tensor t = at::randint(64, {4, 17}, gen, at::kLong);
    return data::Batch{t.narrow(1, 0, 16).contiguous(), t.narrow(1, 1, 16).contiguous()};
  };
  at::Tensor loss_sum = at::zeros({});
  const auto& ds = dynamic_cast<const fp8::DelayedScaling&>(*session.scaling());
  for (int step = 1; step <= 2; ++step) {
    session.step(next, 1e-3, loss_sum);
    REQUIRE(ds.update_count() == (per_micro ? kMicroBatches * step : step));
    REQUIRE(ds.weight_epoch() == step);
    for (int j = 0; j < ds.num_slots(); ++j) {
      const std::string& name = ds.slot_name(j);
      INFO(name);
      // The weight records in the first micro-batch only, so in microbatch mode its zero amax
      // skips the other updates: one row per step in both modes. Inputs and gradients record
      // in every micro-batch: one row per update.
      const bool weight = name.size() > 7 && name.compare(name.size() - 7, 7, ":weight") == 0;
      REQUIRE(recorded_rows(ds, j) == (per_micro && !weight ? kMicroBatches * step : step));
    }
  }
  REQUIRE(std::isfinite(loss_sum.item<double>()));
}
