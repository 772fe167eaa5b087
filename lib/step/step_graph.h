// The training step as one CUDA graph (train.cuda_graphs): on a CUDA device, after
// StepGraph::kWarmupSteps eager steps, the step's device work is captured once and then
// replayed, so that each step costs one graph launch instead of a few thousand kernel launches
// (what limits small models such as the 124M GPT, whose kernels are short).
//
// What the graph holds (Session::step's device work, in the eager order): every micro-batch's
// forward, loss and backward, the global gradient norm, the non-finite flags, the FP16 loss
// scaler's unscale and update, the clip divisor, AdamW (its learning rate read from a device
// tensor) and the release of the gradients. What runs eagerly around each replay, because it
// keeps state on the host: copying the step's tokens into the graph's input buffers and its
// learning rate into the device tensor before; the FP8 scale update (its update counters and
// the weight cache's epoch live on the host), the skipped-step counters (they record the step
// number), adding the loss to the caller's running sum and bumping the parameters' version
// counters after (a replay changes the weights without the host knowing: the FP8 weight cache
// of an evaluation must see them as new). The FP8 scale update reads and writes only the
// recipe's state, which the optimizer does not touch, so moving it after the optimizer gives
// the same bits as the eager order.
//
// The warm-up steps create what the first steps create lazily (cuBLASLt plans and workspace,
// the FP8 weight cache, autograd's buffers) outside the graph; the capture runs the body once on
// a side stream into a private memory pool without executing it, and the same step is then
// replayed. A failed capture (or a batch of another shape) drops the graph, logs why and the
// step runs eagerly, from then on. cuda_graph_fallback_reason decides which configurations are
// never captured.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device

#include <cstdint>     // int64_t
#include <functional>  // std::function
#include <memory>      // std::unique_ptr
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/data/dataset.h"       // data::Batch

namespace fp8t::step {

// Why the training step of `cfg` runs eagerly (no CUDA graph) on `device`, naming the key or the
// reason; "" when it is captured. `job_ranks`: the ranks of the data-parallel job this process
// is part of (any job, even of one rank, has gradient hooks), 0 for a single process.
std::string cuda_graph_fallback_reason(const ExperimentConfig& cfg, const c10::Device& device, int job_ranks);

// Tests: with FP8TRAIN_TEST_CAPTURE=fail in the environment, throws fp8t::Error ("injected");
// the Session calls it half-way through the captured body (after the backward), where a real
// failure leaves the most host state behind. Otherwise does nothing.
void maybe_inject_capture_failure();

// One captured CUDA graph and its private memory pool (CUDA builds; elsewhere capture throws).
class CapturedGraph {
 public:
  // Runs `body` once under stream capture on a side stream of `device` (nothing executes); the
  // tensors it allocates come from the graph's pool and stay valid while the graph lives.
  // Throws fp8t::Error, after ending the capture, when the capture fails.
  static std::unique_ptr<CapturedGraph> capture(const std::function<void()>& body, const c10::Device& device);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  // Launches the graph on the device's current stream.
  void replay();

 private:
  CapturedGraph();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What the captured device work of one step leaves: 0-d float32 tensors on the device.
struct StepOutputs {
  at::Tensor grad_norm;     // the global gradient norm before clipping
  at::Tensor applied_loss;  // the micro-batch losses summed; 0 for a skipped step
};

// The graph of one Session: eager warm-up steps, then one capture, then replays.
class StepGraph {
 public:
  // Eager steps before the capture: the first creates the lazily built state, the second runs
  // with all of it in place (as every later step does).
  static constexpr int64_t kWarmupSteps = 2;
  using MicroBatch = std::function<data::Batch(int64_t)>;
  // The step's device work: micro-batch m's tokens from micro_batch(m), the learning rate from `lr`.
  using Body = std::function<StepOutputs(const MicroBatch& micro_batch, const at::Tensor& lr)>;

  StepGraph(const c10::Device& device, int64_t micro_batches);
  ~StepGraph();

  // Whether this step runs through the graph (the warm-up is done); count_eager_step otherwise.
  bool ready() const { return eager_steps_ >= kWarmupSteps; }
  void count_eager_step() { ++eager_steps_; }
  bool captured() const { return graph_ != nullptr; }

  // Copies the step's micro-batches and learning rate into the graph's inputs, captures `body`
  // at the first call, and replays. Returns the graph's outputs: the same tensors every step,
  // overwritten by the next replay. Throws fp8t::Error when the capture fails or a batch's
  // shape differs from the captured one (the caller then drops the graph).
  StepOutputs run(const std::vector<data::Batch>& batches, double lr, const Body& body);

 private:
  void stage(const std::vector<data::Batch>& batches, double lr);
  void capture(const Body& body);

  c10::Device device_;
  int64_t micro_batches_;
  int64_t eager_steps_ = 0;
  std::vector<data::Batch> inputs_;  // one per micro-batch, on the device
  at::Tensor lr_;                    // 0-d float32 on the device
  StepOutputs outputs_;
  std::unique_ptr<CapturedGraph> graph_;
};

}  // namespace fp8t::step
