#include "lib/train/session.h"

#include <torch/torch.h>  // torch::manual_seed, torch::NoGradGuard

#include "lib/dist/communicator.h"  // dist::Communicator
#include "lib/dist/grad_sync.h"     // dist::GradientSync
#include "lib/fp8/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/fp8/rewrite.h"        // fp8::rewrite_to_fp8
#include "lib/model/gpt.h"          // model::Gpt
#include "lib/train/grad_clip.h"    // global_grad_norm, clip_divisor
#include "lib/train/loss_scaler.h"  // LossScaler
#include "lib/train/optimizer.h"    // AdamW
#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::AutocastGuard

namespace fp8t {
namespace train {

namespace {

c10::ScalarType autocast_dtype_for(const ExperimentConfig& cfg, const c10::Device& device) {
  // FP8 runs keep everything outside the FP8 GEMMs in BF16 on the GPU (as TE does under
  // autocast); on the CPU emulation it is FP32 so that only the FP8 casts differ from fp32.
  if (cfg.precision == Precision::kBf16) return at::kBFloat16;
  if (cfg.precision == Precision::kFp16) return at::kHalf;  // FP16 AMP, on the CPU too
  if (cfg.precision == Precision::kFp8 && device.is_cuda()) return at::kBFloat16;
  return at::kFloat;
}

}  // namespace

Session::Session(const ExperimentConfig& cfg, const c10::Device& device)
    : cfg_(cfg), device_(device), autocast_dtype_(autocast_dtype_for(cfg, device)) {
  torch::manual_seed(cfg_.run.seed);
  gpt_ = std::make_shared<model::Gpt>(cfg_.model);
  gpt_->to(device_);
  if (cfg_.precision == Precision::kFp8) {
    auto rewritten = fp8::rewrite_to_fp8(*gpt_, cfg_.fp8, device_);
    scaling_ = rewritten.scaling;
    rewrite_report_ = rewritten.report.to_string();
    rewrite_ = std::make_shared<const fp8::RewriteReport>(std::move(rewritten.report));
  }
  if (cfg_.precision == Precision::kFp16) {
    loss_scaler_ = std::make_unique<LossScaler>(LossScalerOptions::from(cfg_.train), device_);
  }
  for (const auto& np : gpt_->unique_named_parameters()) params_.push_back(np.second);
}

Session::~Session() = default;

AdamW& Session::optimizer() {
  FP8T_CHECK(opt_, "Session::prepare_training was not called");
  return *opt_;
}

const AdamW& Session::optimizer() const {
  FP8T_CHECK(opt_, "Session::prepare_training was not called");
  return *opt_;
}

void Session::prepare_training(std::shared_ptr<dist::Communicator> comm) {
  FP8T_CHECK(!opt_, "Session::prepare_training called twice");
  comm_ = std::move(comm);
  if (comm_) {
    {
      torch::NoGradGuard no_grad;
      comm_->broadcast(params_, 0);  // identical starting weights whatever each rank's RNG did
    }
    const auto bucket_bytes = static_cast<int64_t>(cfg_.dist.bucket_mb * 1024.0 * 1024.0);
    grad_sync_ = std::make_unique<dist::GradientSync>(comm_, params_, std::max<int64_t>(bucket_bytes, 1));
    if (scaling_ && cfg_.fp8.reduce_amax) {  // fp8.reduce_amax false: every rank keeps its own scales
      dist::Communicator* c = comm_.get();
      scaling_->set_amax_reducer([c](at::Tensor& row0) { c->all_reduce(row0, dist::ReduceOp::kMax); });
    }
  }
  opt_ = std::make_unique<AdamW>(gpt_->unique_named_parameters(), AdamWOptions::from(cfg_.train));
}

at::Tensor Session::step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                         const std::function<void(const char*)>& mark) {
  FP8T_CHECK(opt_, "Session::prepare_training was not called");
  auto phase = [&](const char* name) {
    if (mark) mark(name);
  };
  const int64_t micro_batches = cfg_.train.grad_accum_steps;
  {
    compat::AutocastGuard autocast(device_.type(), autocast_dtype_);
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      const data::Batch b = next_batch();
      if (grad_sync_ && micro + 1 == micro_batches) grad_sync_->arm();  // reduce during the last backward
      const at::Tensor logits = gpt_->forward(b.inputs.to(device_, /*non_blocking=*/true));
      phase("forward");
      const at::Tensor loss = model::Gpt::loss(logits, b.targets.to(device_, /*non_blocking=*/true));
      phase("loss");
      (loss / static_cast<double>(micro_batches)).backward();
      loss_sum += loss.detach();
      phase("backward");
      // fp8.amax_update microbatch: a scale update after every micro-batch (a no-op for `step`).
      if (scaling_ && micro + 1 < micro_batches) scaling_->end_micro_batch(/*last_of_step=*/false);
    }
  }
  if (grad_sync_) grad_sync_->finish();  // gradients now averaged over the ranks
  phase("grad_sync");
  // Scales for the next step (amax MAX over ranks first).
  if (scaling_) scaling_->end_micro_batch(/*last_of_step=*/true);
  phase("fp8_update");
  // Clipping is folded into the optimizer: AdamW divides the gradients by the clip divisor
  // as it reads them (one pass over the gradients fewer than scaling them first).
  const at::Tensor grad_norm = global_grad_norm(params_);
  phase("clip");
  opt_->step(lr, cfg_.train.grad_clip > 0.0 ? clip_divisor(grad_norm, cfg_.train.grad_clip) : at::Tensor());
  if (grad_sync_) {
    grad_sync_->zero_grad();  // the grads stay views into the all-reduce buckets
  } else {
    opt_->zero_grad();
  }
  phase("optimizer");
  return grad_norm;
}

at::Tensor Session::eval_loss_sum(const std::function<data::Batch(int64_t)>& batch, int64_t batches) {
  gpt_->eval();
  torch::NoGradGuard no_grad;
  compat::AutocastGuard autocast(device_.type(), autocast_dtype_);
  at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  for (int64_t i = 0; i < batches; ++i) {
    const data::Batch b = batch(i);
    total += model::Gpt::loss(gpt_->forward(b.inputs.to(device_)), b.targets.to(device_));
  }
  gpt_->train();
  return total;
}

}  // namespace train
}  // namespace fp8t
