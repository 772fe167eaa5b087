#include "lib/step/step_graph.h"

#include <ATen/ATen.h>   // at::empty, at::zeros
#include <fmt/format.h>  // fmt::format

#include <cstdlib>  // std::getenv
#include <string>   // std::string

#include "lib/config/parallel_layout.h"  // ParallelLayout
#include "lib/util/error.h"   // FP8T_CHECK, FP8T_THROW
#include "lib/util/memory.h"  // release_cached_memory

namespace fp8t::step {

std::string cuda_graph_fallback_reason(const ExperimentConfig& cfg, const c10::Device& device, int job_ranks) {
  if (!cfg.train.cuda_graphs) return "train.cuda_graphs is false";
  if (!device.is_cuda()) return "the device is the CPU, and train.cuda_graphs applies to CUDA devices";
  if (job_ranks > 0 && ParallelLayout::of(cfg.dist).shards_weights()) {
    return "dist.zero 3 (ZeRO-3): each unit's all-gathers and reduce-scatters are issued from the model's unit hooks "
           "and autograd nodes as the step runs (and the weights' storage comes and goes), which a replayed graph "
           "would not do";
  }
  if (job_ranks > 0) {
    return fmt::format("a data-parallel job ({} rank{}): the gradient collectives are launched from autograd "
                       "hooks as the buckets fill, which a replayed graph would not do",
                       job_ranks, job_ranks == 1 ? "" : "s");
  }
  if (cfg.model.dropout > 0.0) {
    return fmt::format("model.dropout is {}: the dropout masks' random numbers are not replayed like the eager "
                       "steps' (only dropout 0 is captured)", cfg.model.dropout);
  }
  if (cfg.precision == Precision::kFp8 && cfg.fp8.stats) {
    return "fp8.stats is on: log steps collect statistics in their casts and the other steps do not, so the "
           "steps differ";
  }
  if (cfg.precision == Precision::kFp8 && cfg.fp8.amax_update == fp8::AmaxUpdate::kMicrobatch &&
      cfg.train.grad_accum_steps > 1) {
    return "fp8.amax_update is microbatch with train.grad_accum_steps " + std::to_string(cfg.train.grad_accum_steps) +
           ": the scale updates between the micro-batches keep their counters on the host";
  }
  return "";
}

void maybe_inject_capture_failure() {
  const char* v = std::getenv("FP8TRAIN_TEST_CAPTURE");
  if (v != nullptr && std::string(v) == "fail") {
    FP8T_THROW(ExitCode::kFailure, "injected capture failure (FP8TRAIN_TEST_CAPTURE=fail)");
  }
}

StepGraph::StepGraph(const c10::Device& device, int64_t micro_batches)
    : device_(device), micro_batches_(micro_batches) {
  FP8T_CHECK(micro_batches >= 1, "StepGraph: micro_batches must be >= 1");
}

StepGraph::~StepGraph() = default;

StepOutputs StepGraph::run(const std::vector<data::Batch>& batches, double lr, const Body& body) {
  stage(batches, lr);
  if (!graph_) capture(body);
  graph_->replay();
  return outputs_;
}

// The graph reads its inputs from fixed addresses: the step's tokens and learning rate are
// copied there (on the current stream, before the replay).
void StepGraph::stage(const std::vector<data::Batch>& batches, double lr) {
  FP8T_CHECK(static_cast<int64_t>(batches.size()) == micro_batches_, "StepGraph: ", batches.size(),
             " micro-batches, the graph has ", micro_batches_);
  if (inputs_.empty()) {
    for (const data::Batch& b : batches) {
      inputs_.push_back(data::Batch{at::empty(b.inputs.sizes(), b.inputs.options().device(device_)),
                                    at::empty(b.targets.sizes(), b.targets.options().device(device_))});
    }
    lr_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  }
  for (size_t m = 0; m < batches.size(); ++m) {
    const data::Batch& b = batches[m];
    data::Batch& into = inputs_[m];
    if (b.inputs.sizes() != into.inputs.sizes() || b.targets.sizes() != into.targets.sizes() ||
        b.inputs.scalar_type() != into.inputs.scalar_type() || b.targets.scalar_type() != into.targets.scalar_type()) {
      FP8T_THROW(ExitCode::kFailure, "a batch of shape ", b.inputs.sizes(), " where the graph was captured for ",
                 into.inputs.sizes());
    }
    into.inputs.copy_(b.inputs, /*non_blocking=*/true);
    into.targets.copy_(b.targets, /*non_blocking=*/true);
  }
  lr_.fill_(lr);  // rounded to float32, as the AdamW kernel rounds a host lr
}

void StepGraph::capture(const Body& body) {
  // The warm-up steps' cached blocks go back to the driver: the graph allocates from its own pool.
  release_cached_memory(device_);
  const MicroBatch micro = [this](int64_t m) { return inputs_.at(static_cast<size_t>(m)); };
  StepOutputs captured;
  graph_ = CapturedGraph::capture([&] { captured = body(micro, lr_); }, device_);
  outputs_ = captured;
  release_cached_memory(device_);  // what the capture replaced (e.g. the eager FP8 weight copies)
}

#if !defined(FP8T_WITH_CUDA)
// Without CUDA there is nothing to capture: cuda_graph_fallback_reason keeps every CPU run eager.
struct CapturedGraph::Impl {};
CapturedGraph::CapturedGraph() = default;
CapturedGraph::~CapturedGraph() = default;
std::unique_ptr<CapturedGraph> CapturedGraph::capture(const std::function<void()>& /*body*/,
                                                      const c10::Device& /*device*/) {
  FP8T_THROW(ExitCode::kFailure, "CUDA graphs: this build has no CUDA");
}
void CapturedGraph::replay() { FP8T_THROW(ExitCode::kFailure, "CUDA graphs: this build has no CUDA"); }
#endif

}  // namespace fp8t::step
