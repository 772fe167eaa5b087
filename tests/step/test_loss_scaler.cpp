// lib/step/loss_scaler.*: GradScaler's rules, the device-side check and unscale, the unscale
// folded into AdamW, the state round trip, and a whole fp16 run with skips and a resume.
#include "lib/step/loss_scaler.h"

#include <algorithm>   // std::find_if
#include <cmath>       // std::isfinite
#include <filesystem>  // std::filesystem::path
#include <fstream>     // std::ifstream
#include <limits>      // std::numeric_limits

#include <torch/torch.h>

#include "lib/optim/grad_clip.h"  // global_grad_norm, clip_divisor
#include "lib/optim/optimizer.h"  // AdamW (the folded unscale is its grad_scale)
#include "lib/train/trainer.h"    // run_training (the fp16 run)
#include "lib/util/error.h"       // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"       // TempDir

using fp8t::step::LossScaler;
using fp8t::step::LossScalerOptions;

namespace {

const c10::Device kCpu(at::kCPU);

at::Tensor flag(bool inf) { return at::full({}, inf ? 1.0f : 0.0f); }

}  // namespace

TEST_CASE("loss scaler: growth, backoff and the tracker reset follow GradScaler", "[step]") {
  // Expected values: torch.amp.GradScaler("cpu", init_scale=8, growth_factor=2,
  // backoff_factor=0.5, growth_interval=3) driven through the same sequence of steps (an inf
  // written into one gradient on the steps marked 1), get_scale() and _growth_tracker after
  // each update(). Exact: the scale is a power of two and the tracker an integer.
  const bool inf[] = {0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0};
  const double scale[] = {8, 8, 16, 8, 8, 8, 16, 16, 8, 4, 4};
  const int tracker[] = {1, 2, 0, 0, 1, 2, 0, 1, 0, 0, 1};
  LossScaler s(LossScalerOptions{8.0, 2.0, 0.5, 3}, kCpu);
  REQUIRE(s.read_scale() == 8.0);
  for (size_t i = 0; i < std::size(inf); ++i) {
    INFO("step " << i + 1);
    s.update(flag(inf[i]));
    REQUIRE(s.read_scale() == scale[i]);
    REQUIRE(s.growth_tracker().item<int>() == tracker[i]);
    REQUIRE(s.found_inf().item<float>() == 0.0f);  // cleared for the next step
  }
}

TEST_CASE("loss scaler: the defaults double the scale after 2000 finite steps", "[step]") {
  fp8t::TrainSection t;  // train.loss_scale_* defaults
  LossScaler s(LossScalerOptions::from(t), kCpu);
  REQUIRE(s.read_scale() == 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(flag(false));
  REQUIRE(s.read_scale() == 65536.0);
  REQUIRE(s.growth_tracker().item<int>() == 1999);
  s.update(flag(false));
  REQUIRE(s.read_scale() == 131072.0);
  REQUIRE(s.growth_tracker().item<int>() == 0);
  s.update(flag(true));
  REQUIRE(s.read_scale() == 65536.0);
}

TEST_CASE("loss scaler: the device check finds inf and NaN and unscales exactly", "[step]") {
  LossScaler s(LossScalerOptions{1024.0, 2.0, 0.5, 2000}, kCpu);
  const at::Tensor loss = at::full({}, 3.0f);
  REQUIRE(s.scale_loss(loss).item<float>() == 3072.0f);

  std::vector<at::Tensor> grads{at::full({3}, 2048.0f), at::full({2, 2}, -512.0f)};
  s.unscale_(grads);
  REQUIRE(s.found_inf().item<float>() == 0.0f);
  REQUIRE(grads[0].eq(2.0f).all().item<bool>());  // x 1/1024, exact for a power of two
  REQUIRE(grads[1].eq(-0.5f).all().item<bool>());

  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    INFO("bad value " << bad);
    std::vector<at::Tensor> g{at::ones({4}), at::ones({5})};
    g[1][3] = bad;
    s.unscale_(g);
    REQUIRE(s.found_inf().item<float>() == 1.0f);
    // The folded form flags the same step from the norm of the scaled gradients.
    s.update();
    at::Tensor p = at::zeros({5}).set_requires_grad(true);
    p.mutable_grad() = g[1].clone();
    const at::Tensor unscaled = s.unscale_norm(fp8t::optim::global_grad_norm({p}));
    REQUIRE(s.found_inf().item<float>() == 1.0f);
    REQUIRE_FALSE(std::isfinite(unscaled.item<float>()));
    s.update();
  }
  // Four flagged steps, four backoffs: 1024 -> 64; a finite norm is unscaled by the current scale.
  REQUIRE(s.read_scale() == 64.0);
  REQUIRE(s.unscale_norm(at::full({}, 1280.0f)).item<float>() == 20.0f);
  REQUIRE(s.found_inf().item<float>() == 0.0f);
}

TEST_CASE("loss scaler: the unscale folded into AdamW gives the bits of unscaling first", "[step]") {
  // AdamW divides by grad_divisor() = S * clip divisor as it reads the scaled gradients; the
  // reference unscales them in place (GradScaler.unscale_), then clips through the divisor.
  // Bit-equal because S is a power of two (dividing by it is exact).
  torch::manual_seed(3);
  const at::Tensor w0 = torch::randn({8, 4});
  const at::Tensor g = torch::randn({8, 4}) * 4096.0;  // scaled gradients, S = 4096
  auto run = [&](bool folded) {
    at::Tensor w = w0.clone().set_requires_grad(true);
    w.mutable_grad() = g.clone();
    fp8t::optim::AdamW opt({{"w", w}}, {});
    LossScaler s(LossScalerOptions{4096.0, 2.0, 0.5, 2000}, kCpu);
    if (folded) {
      const at::Tensor norm = s.unscale_norm(fp8t::optim::global_grad_norm({w}));
      opt.step(1e-2, s.grad_divisor(fp8t::optim::clip_divisor(norm, 0.5)));
    } else {
      s.unscale_({w.grad()});
      opt.step(1e-2, fp8t::optim::clip_divisor(fp8t::optim::global_grad_norm({w}), 0.5));
    }
    REQUIRE(s.found_inf().item<float>() == 0.0f);
    return w.detach().clone();
  };
  const at::Tensor a = run(true), b = run(false);
  REQUIRE_FALSE(a.equal(w0));  // the step happened
  REQUIRE(a.equal(b));
}

TEST_CASE("loss scaler: state round trip and bad checkpoint keys", "[step]") {
  LossScaler a(LossScalerOptions{64.0, 2.0, 0.5, 4}, kCpu);
  a.update(flag(false));
  a.update(flag(true));
  a.update(flag(false));  // scale 32, tracker 1
  LossScaler b(LossScalerOptions{64.0, 2.0, 0.5, 4}, kCpu);
  std::map<std::string, at::Tensor> saved;
  for (const auto& [k, v] : a.state_dict()) saved[k] = v.clone();
  b.load_state_dict(saved);
  REQUIRE(b.read_scale() == 32.0);
  REQUIRE(b.growth_tracker().item<int>() == 1);
  for (int i = 0; i < 3; ++i) b.update(flag(false));  // the restored tracker counts on
  REQUIRE(b.read_scale() == 64.0);

  saved.erase("loss_scale.growth_tracker");
  try {
    b.load_state_dict(saved);
    FAIL("no error for a missing key");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("loss_scale.growth_tracker"));
  }
}

namespace {

fp8t::config::LoadedConfig fp16_run(const std::string& out_dir, const std::string& name) {
  fp8t::config::LoadedConfig c;
  c.config.precision = fp8t::Precision::kFp16;
  c.config.run.out_dir = out_dir;
  c.config.run.name = name;
  c.config.run.quiet = true;
  c.config.run.device = fp8t::DeviceKind::kCpu;
  c.config.model.n_layer = 1;
  c.config.model.d_model = 32;
  c.config.model.n_head = 2;
  c.config.model.seq_len = 32;
  c.config.train.steps = 30;
  c.config.train.micro_batch_size = 8;
  c.config.train.warmup_steps = 3;
  c.config.train.lr = 1e-2;
  c.config.train.eval_interval = 0;
  c.config.train.eval_batches = 1;
  c.config.train.log_interval = 1;
  // 2^24 overflows FP16 in the first backward (a logit gradient of 1/256 becomes 65536 >
  // 65504): the first steps are skipped while the scale backs off; growth every 4 finite steps
  // makes the scale move (and overflow again) within the run, so the resume below has to
  // restore a growth tracker in the middle of its count.
  c.config.train.loss_scale_init = 16777216.0;
  c.config.train.loss_scale_growth_interval = 4;
  c.config.train.max_skipped_steps = 30;
  return c;
}

std::vector<nlohmann::json> metric_rows(const std::filesystem::path& run) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json row = nlohmann::json::parse(line);
    if (row.contains("loss")) rows.push_back(std::move(row));  // the training rows (not eval rows)
  }
  return rows;
}

}  // namespace

TEST_CASE("loss scaler: an fp16 run skips overflowing steps, trains and resumes bit for bit", "[step]") {
  fp8t::test::TempDir tmp("fp16_run");
  const auto straight = fp8t::train::run_training(fp16_run(tmp.path().string(), "straight"), {});
  fp8t::train::TrainOptions stop;
  stop.stop_after = 13;
  fp8t::train::run_training(fp16_run(tmp.path().string(), "split"), stop);
  fp8t::train::TrainOptions resume;
  resume.resume = true;
  const auto split = fp8t::train::run_training(fp16_run(tmp.path().string(), "split"), resume);

  const auto a = metric_rows(tmp.path() / "straight"), b = metric_rows(tmp.path() / "split");
  REQUIRE(a.size() == 30);
  REQUIRE(b.size() == 30);
  int64_t skipped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1);
    // Bit for bit: the loss, the scale and the skips of every step (exact comparison of doubles).
    REQUIRE(a[i]["loss"] == b[i]["loss"]);
    REQUIRE(a[i]["loss_scale"] == b[i]["loss_scale"]);
    REQUIRE(a[i]["skipped_steps"] == b[i]["skipped_steps"]);
    skipped += a[i]["skipped_steps"].get<int64_t>();
  }
  // The first step overflows at 2^24 and is skipped; the scale backs off below that.
  REQUIRE(a[0]["skipped_steps"] == 1);
  REQUIRE(a[0]["loss_scale"].get<double>() == 8388608.0);
  REQUIRE(skipped >= 2);
  REQUIRE(straight["skipped_steps"] == skipped);
  REQUIRE(split["skipped_steps"] == skipped);
  // It trains: ln(64) = 4.16 at the start; 30 steps of a 1-layer model learn the bigrams.
  // (A skipped step's row has no mean loss to report; the first applied step's does.)
  const auto applied = std::find_if(a.begin(), a.end(), [](const nlohmann::json& r) { return r["loss"].is_number(); });
  REQUIRE(applied != a.end());
  const double first = (*applied)["loss"].get<double>();
  REQUIRE(straight["final_loss"].get<double>() < 0.85 * first);
  REQUIRE(straight["final_loss"] == split["final_loss"]);
  REQUIRE(straight["precision_chart"]["loss_scaling"]["precision"] == "dynamic");
  REQUIRE(straight["precision_chart"]["compute_gemm"]["precision"] == "FP16");
}
