// Training runs of a tiny model on the ranks of tests/dist/dist_test_util.h's run_ranks, for the
// ZeRO tests (tests/dist/test_zero.cpp, test_fully_sharded.cpp): every rank trains the same
// model from the same starting weights on its own rows, and the losses, the FP8 scales and the
// final weights come back for comparison.
#pragma once

#include <torch/torch.h>  // torch::NoGradGuard

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <map>        // std::map
#include <memory>     // std::shared_ptr
#include <mutex>      // std::mutex
#include <vector>     // std::vector

#include "lib/dist/communicator.h"    // Communicator
#include "lib/dist/fully_sharded.h"   // FullyShardedModel::gather_full_parameters
#include "lib/dist/grad_sync.h"       // GradientSync
#include "lib/fp8/recipes/scaling.h"  // fp8::Scaling
#include "lib/model/gpt.h"            // model::Gpt::unique_named_parameters
#include "lib/step/session.h"         // step::Session
#include "lib/step/step_health.h"     // step::StepHealth
#include "tests/catch.h"

namespace fp8t::test {

// One layer, d_model 32, 16 tokens, micro-batches of 2 rows, two micro-batches per step, with
// 8 KiB buckets (several, and parameters split across shards).
inline ExperimentConfig tiny_run_config(Precision precision, ZeroStage zero) {
  ExperimentConfig c;
  c.precision = precision;
  c.model.n_layer = 1;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  c.train.micro_batch_size = 2;
  c.train.grad_accum_steps = 2;
  c.dist.zero = zero;
  c.dist.bucket_mb = 8.0 / 1024.0;
  return c;
}

// Rank `rank`'s rows of micro-batch `micro` of step `step` (vocab 64, 16 tokens, `rows` rows).
inline data::Batch rank_batch(int rank, int step, int micro, int64_t rows = 2, int64_t seq = 16) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1000 * step + 10 * micro + rank + 1);
  const at::Tensor t = at::randint(64, {rows, seq + 1}, gen, at::kLong);
  return {t.narrow(1, 0, seq).contiguous(), t.narrow(1, 1, seq).contiguous()};
}

struct RunTrace {
  std::vector<double> losses;      // this rank's loss per step
  std::vector<at::Tensor> scales;  // fp8: the scales after every step
  at::Tensor weights;              // all parameters, flattened in parameter order, after the last step
  int segments = 0;                // ZeRO-1: parameters with a range on this rank
  int split_parts = 0;             // ZeRO-3: parts of this rank that start inside their parameter
  int64_t skipped = 0;             // non-finite steps skipped
};

// Every parameter's values after training, in the order of Session::parameters(), on the CPU
// (ZeRO-3: gathered from the shards, a collective).
inline at::Tensor final_weights(step::Session& session) {
  std::vector<at::Tensor> flat;
  if (dist::FullyShardedModel* sharded = session.fully_sharded()) {
    std::map<std::string, at::Tensor> by_name;
    for (auto& [name, t] : sharded->gather_full_parameters()) by_name[name] = t;
    for (const auto& [name, p] : session.model().unique_named_parameters()) flat.push_back(by_name.at(name).reshape(-1));
  } else {
    for (const at::Tensor& p : session.parameters()) flat.push_back(p.detach().reshape(-1).cpu());
  }
  return at::cat(flat);
}

// `steps` steps of `cfg` (learning rate 3e-3) on this rank from fixed starting weights.
inline RunTrace train_ranks_run(int rank, dist::Communicator& comm, const ExperimentConfig& cfg, int steps,
                                const at::Device& device = at::Device(at::kCPU)) {
  // The ranks are threads, and a Session seeds and draws from the global generator: one at a
  // time, so that rank 0's weights (broadcast to the others) are the same in every run.
  static std::mutex construction;
  std::unique_lock<std::mutex> lock(construction);
  step::Session session(cfg, device);
  lock.unlock();
  {
    // The same starting weights in every run, whatever the global generator did.
    torch::NoGradGuard no_grad;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(77);
    for (const at::Tensor& p : session.parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.05);
  }
  session.prepare_training(std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {}));
  RunTrace t;
  if (session.gradient_sync() && session.gradient_sync()->sharded()) {
    t.segments = static_cast<int>(session.gradient_sync()->shard_segments().size());
  }
  if (dist::FullyShardedModel* sharded = session.fully_sharded()) {
    for (const auto& seg : sharded->segments()) t.split_parts += seg.begin > 0 ? 1 : 0;
  }
  const int64_t rows = cfg.train.micro_batch_size, seq = cfg.model.seq_len;
  for (int step = 0; step < steps; ++step) {
    int micro = 0;
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device));  // where the losses are
    session.step([&] { return rank_batch(rank, step, micro++, rows, seq); }, 3e-3, loss_sum, {}, step + 1);
    t.losses.push_back(loss_sum.item<double>() / static_cast<double>(cfg.train.grad_accum_steps));
    if (session.scaling()) t.scales.push_back(session.scaling()->scale().cpu().clone());
  }
  t.weights = final_weights(session);
  t.skipped = session.health().read().skipped;
  return t;
}

// The largest relative difference between two loss sequences of one length.
inline double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

}  // namespace fp8t::test
