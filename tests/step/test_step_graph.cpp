// lib/step/step_graph.*: which configurations replay the training step as a CUDA graph, and the
// eager fallback (the capture itself is tested on a GPU in test_step_graph_cuda.cpp).
#include "lib/step/step_graph.h"

#include <torch/torch.h>  // torch::zeros

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/step/session.h"  // Session
#include "tests/catch.h"

using namespace fp8t;
using step::cuda_graph_fallback_reason;

namespace {

const c10::Device kGpu(c10::DeviceType::CUDA, 0);  // a device value only: nothing touches CUDA

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cuda graphs: the configurations that run eagerly name their reason", "[step]") {
  ExperimentConfig cfg;
  REQUIRE(cfg.train.cuda_graphs);  // on by default
  CHECK(cuda_graph_fallback_reason(cfg, kGpu, 0).empty());
  cfg.precision = Precision::kFp8;
  CHECK(cuda_graph_fallback_reason(cfg, kGpu, 0).empty());
  cfg.train.grad_accum_steps = 4;  // every micro-batch is captured
  cfg.train.recompute = Recompute::kBlock;
  cfg.fp8.interval = 3;  // the scale update runs after the replay, where its counter lives
  CHECK(cuda_graph_fallback_reason(cfg, kGpu, 0).empty());

  SECTION("the switch, the device and the ranks") {
    ExperimentConfig off = cfg;
    off.train.cuda_graphs = false;
    CHECK(cuda_graph_fallback_reason(off, kGpu, 0) == "train.cuda_graphs is false");
    CHECK(cuda_graph_fallback_reason(off, c10::Device(c10::kCPU), 4) == "train.cuda_graphs is false");  // first
    CHECK(mentions(cuda_graph_fallback_reason(cfg, c10::Device(c10::kCPU), 0), "the device is the CPU"));
    CHECK(mentions(cuda_graph_fallback_reason(cfg, kGpu, 2), "a data-parallel job (2 ranks): the gradient collectives"));
    // A job of one rank (torchrun --nproc-per-node 1) still has the gradient hooks.
    CHECK(mentions(cuda_graph_fallback_reason(cfg, kGpu, 1), "a data-parallel job (1 rank):"));
  }
  SECTION("dropout") {
    cfg.model.dropout = 0.1;
    CHECK(mentions(cuda_graph_fallback_reason(cfg, kGpu, 0), "model.dropout is 0.1"));
  }
  SECTION("fp8.stats, only where fp8 runs") {
    cfg.fp8.stats = true;
    CHECK(mentions(cuda_graph_fallback_reason(cfg, kGpu, 0), "fp8.stats is on"));
    cfg.precision = Precision::kBf16;
    CHECK(cuda_graph_fallback_reason(cfg, kGpu, 0).empty());
  }
  SECTION("per-micro-batch scale updates with several micro-batches") {
    cfg.fp8.amax_update = fp8::AmaxUpdate::kMicrobatch;
    CHECK(mentions(cuda_graph_fallback_reason(cfg, kGpu, 0), "fp8.amax_update is microbatch with train.grad_accum_steps 4"));
    cfg.train.grad_accum_steps = 1;  // then its one update per step runs after the replay
    CHECK(cuda_graph_fallback_reason(cfg, kGpu, 0).empty());
    cfg.train.grad_accum_steps = 4;
    cfg.precision = Precision::kBf16;
    CHECK(cuda_graph_fallback_reason(cfg, kGpu, 0).empty());
  }
}

TEST_CASE("cuda graphs: a CPU session trains eagerly and says why", "[step]") {
  ExperimentConfig cfg;
  cfg.model.n_layer = 1;
  cfg.model.d_model = 32;
  cfg.model.n_head = 2;
  cfg.model.seq_len = 8;
  cfg.train.micro_batch_size = 2;
  step::Session session(cfg, at::Device(at::kCPU));
  session.prepare_training(nullptr);
  REQUIRE_FALSE(session.cuda_graph_active());
  REQUIRE(mentions(session.cuda_graph_off_reason(), "the device is the CPU"));
  const at::Tensor tokens = torch::randint(cfg.model.vocab_size, {2, 9}, at::kLong);
  const data::Batch batch{tokens.narrow(1, 0, 8).contiguous(), tokens.narrow(1, 1, 8).contiguous()};
  at::Tensor loss_sum = torch::zeros({});
  std::vector<std::string> phases;
  // Past the warm-up a CUDA session would replay ("graph"); this one keeps every eager phase.
  for (int64_t i = 0; i < step::StepGraph::kWarmupSteps + 1; ++i) {
    phases.clear();
    session.step([&] { return batch; }, 1e-3, loss_sum, [&](const char* name) { phases.emplace_back(name); }, i + 1);
  }
  CHECK(phases.back() == "optimizer");
  CHECK(phases.size() == 7);
  CHECK_FALSE(session.cuda_graph_active());
}
