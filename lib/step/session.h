// What `fp8train` (training) and `fp8train bench` share: the model on its device with the FP8
// rewrite applied, and — once training is prepared — the optimizer, the data-parallel hooks and
// one optimizer step. The trainer adds data, evaluation, logging and the run folder around it.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device

#include <functional>  // std::function
#include <map>         // std::map
#include <memory>      // std::shared_ptr, std::unique_ptr
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/config/experiment.h"       // ExperimentConfig
#include "lib/config/parallel_layout.h"  // ParallelLayout
#include "lib/data/dataset.h"            // data::Batch
#include "lib/step/step_graph.h"         // StepGraph, StepOutputs

namespace fp8t {
namespace dist {
class Communicator;
class ExpertParallel;
class FullyShardedModel;
class GradientSync;
}  // namespace dist
namespace fp8 {
class Fp8Attention;
class Scaling;
struct RewriteReport;
}  // namespace fp8
namespace model {
class Model;
}  // namespace model

namespace optim {
class AdamW;
}  // namespace optim

namespace step {

class LossScaler;
class StepHealth;

class Session {
 public:
  // Seeds the RNG with run.seed, builds the model on `device` and, for precision fp8, rewrites
  // it onto FP8 modules (the rewrite report is kept for printing). Running out of memory here,
  // in prepare_training or in the first step() throws fp8t::Error kBadInput with the memory
  // estimate and the levers (lib/plan/resources.h throw_out_of_memory).
  // `layout`: this process's place in the job as the caller resolved it (TrainingJob::layout);
  // without one, one process alone (ParallelLayout::of(cfg.dist)), whose rank and ranks a
  // communicator given to prepare_training then sets. The memory estimates are per rank of it.
  Session(const ExperimentConfig& cfg, const c10::Device& device);
  Session(const ExperimentConfig& cfg, const c10::Device& device, const ParallelLayout& layout);
  // The same around a model built elsewhere (on the CPU, not yet rewritten; e.g. a family the
  // config cannot name, in tests): `cfg.model` then only sizes the memory estimates.
  Session(const ExperimentConfig& cfg, const c10::Device& device, std::shared_ptr<model::Model> model);
  Session(const ExperimentConfig& cfg, const c10::Device& device, std::shared_ptr<model::Model> model,
          const ParallelLayout& layout);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Allocates the optimizer state. With a communicator (a data-parallel job): copies rank 0's
  // parameters to every rank, makes gradients bucket views that are averaged during the
  // backward (dist.zero 3: shards the model instead, lib/dist/fully_sharded.h), and reduces the
  // FP8 amaxes with MAX before each scale update (unless fp8.reduce_amax is false). A layout
  // given for several ranks must be the communicator's (rank and ranks; fp8t::Error otherwise).
  void prepare_training(std::shared_ptr<dist::Communicator> comm);

  // One optimizer step: train.grad_accum_steps micro-batches drawn from `next_batch` (forward
  // and backward under autocast), gradient averaging across ranks, the global gradient norm,
  // the non-finite check, the FP8 scale update (after every micro-batch's backward instead with
  // fp8.amax_update microbatch), clipping and AdamW with learning rate `lr`.
  // The micro-batch losses of an applied step are added to `loss_sum` (a 0-d float32 on the
  // device; nothing is read on the host). Returns the gradient norm before clipping (0-d, on
  // the device).
  // Non-finite steps (health(), lib/step/step_health.h): a non-finite loss (single process;
  // in a data-parallel job it makes the averaged gradients non-finite on every rank) or global
  // gradient norm sets the step's found_inf flag on the device; the optimizer then skips the
  // update and the FP8 scaling drops the step's amaxes. `step_number` (1-based) is recorded
  // by the skip counters.
  // `mark`, when given, is called after each phase with its name ("forward", "loss",
  // "backward", "grad_sync", "clip", "fp8_update", "optimizer"), e.g. to time the phases; a
  // step replayed from the CUDA graph has one phase, "graph".
  // CUDA graphs (train.cuda_graphs, lib/step/step_graph.h): after StepGraph::kWarmupSteps
  // eager steps the step is captured once and replayed, with the same results bit for bit; a
  // configuration that cannot be captured, or a failed capture, runs eagerly (logged once).
  at::Tensor step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                  const std::function<void(const char*)>& mark = {}, int64_t step_number = 0);

  // Mean loss over `batches` without gradients and without touching the FP8 state, summed on
  // the device (rank-local; the caller averages across ranks).
  at::Tensor eval_loss_sum(const std::function<data::Batch(int64_t)>& batch, int64_t batches);

  const ExperimentConfig& config() const { return cfg_; }
  const c10::Device& device() const { return device_; }
  // The layout given (above), with the communicator's rank and ranks once prepare_training ran.
  const ParallelLayout& layout() const { return layout_; }
  model::Model& model() { return *model_; }
  const model::Model& model() const { return *model_; }
  fp8::Scaling* scaling() const { return scaling_.get(); }  // the recipe's state; null unless fp8
  optim::AdamW& optimizer();
  const optim::AdamW& optimizer() const;
  dist::Communicator* communicator() const { return comm_.get(); }
  dist::GradientSync* gradient_sync() const { return grad_sync_.get(); }  // DDP and ZeRO-1; else null
  // ZeRO-3 (dist.zero 3 in a data-parallel job): the sharded model; else null. The parameters then
  // hold no bytes between steps (lib/dist/fully_sharded.h).
  dist::FullyShardedModel* fully_sharded() const { return sharded_.get(); }
  // The non-finite step flag and skip counters (valid after prepare_training).
  StepHealth& health();
  const std::string& rewrite_report() const { return rewrite_report_; }
  // The rewrite decisions, layer by layer (fp8 only; null otherwise).
  const fp8::RewriteReport* rewrite() const { return rewrite_.get(); }
  // fp8.attention: what the attention layers ran so far (fp8::attention_summary); "" without it.
  std::string fp8_attention_summary() const;
  // Expert parallelism (dist.expert_parallel; lib/dist/expert_parallel.h) as checkpoints see it,
  // so that a checkpoint holds whole parameters whatever the layout (session_experts.cpp):
  // whole_experts() gathers this expert group's experts, weights and AdamW moments, into whole
  // tensors under their checkpoint keys ("model.<name>", "optim.<name>.exp_avg", ".exp_avg_sq";
  // every rank calls it: collectives); cut_to_local_experts() cuts those keys of a checkpoint's
  // tensors to this rank's experts, in place. Both do nothing without expert parallelism.
  std::map<std::string, at::Tensor> whole_experts();
  void cut_to_local_experts(std::map<std::string, at::Tensor>& tensors) const;
  bool expert_parallel() const { return experts_ != nullptr; }
  // The dynamic loss scaler (precision fp16 only; null otherwise).
  LossScaler* loss_scaler() const { return loss_scaler_.get(); }
  // Whether prepare_training has run (the optimizer exists).
  bool training_prepared() const { return opt_ != nullptr; }
  // The autocast dtype of forward passes: bf16 for bf16, and for fp8 on the GPU (everything
  // outside the FP8 GEMMs), fp16 for fp16, else float32.
  c10::ScalarType autocast_dtype() const { return autocast_dtype_; }
  const std::vector<at::Tensor>& parameters() const { return params_; }
  // Whether steps are replayed from a captured CUDA graph now, and why not: "" while they are or
  // will be after the warm-up, else the reason (cuda_graph_fallback_reason or a failed capture).
  bool cuda_graph_active() const { return graph_ && graph_->captured(); }
  const std::string& cuda_graph_off_reason() const { return graph_off_reason_; }

 private:
  using MicroBatch = StepGraph::MicroBatch;
  using Mark = std::function<void(const char*)>;
  // A step's learning rate: the host value, or a device tensor (read by a replayed graph).
  struct StepLr {
    double value = 0.0;
    at::Tensor device;
  };
  // The constructor's, prepare_training's and step's work; the public functions turn a CUDA
  // out-of-memory error there (first step only) into an actionable one (lib/plan/resources.h).
  void build();
  void allocate_training_state(std::shared_ptr<dist::Communicator> comm);
  void shard_model();  // ZeRO-3: the FullyShardedModel and the optimizer on its segments
  at::Tensor train_step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                        const Mark& mark, int64_t step_number);
  // The phases of a step. eager_step: all of it in order; graph_step: the device work replayed
  // from the graph, with what keeps host state around it (lib/step/step_graph.h).
  at::Tensor eager_step(const MicroBatch& micro_batch, double lr, at::Tensor& loss_sum, const Mark& mark,
                        int64_t step_number);
  at::Tensor graph_step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                        const Mark& mark, int64_t step_number);
  // Every micro-batch's forward, loss and backward; returns the summed loss (0-d, device).
  at::Tensor forward_backward(const MicroBatch& micro_batch, const Mark& phase);
  // Gradient averaging, norm, non-finite flags, the FP8 scale update (when `scale_update`),
  // clipping, AdamW, the loss scaler's update and the release of the gradients.
  StepOutputs update_step(const at::Tensor& step_loss, const StepLr& lr, const Mark& phase, bool scale_update);
  // dist.expert_parallel in a job of several ranks: the model keeps this rank's experts
  // (Model::keep_experts; expert_names_), before it moves to the device.
  void keep_this_ranks_experts();
  // After the optimizer: the model's per-step state (Model::step_counts summed over the ranks,
  // then Model::end_step with the step's skip flag).
  void end_model_step();
  void set_up_cuda_graph();
  // Drops the graph for good (logged with `why`) and undoes what a failed capture left on the host.
  void drop_graph(const std::string& why);
  // What an in-place optimizer step does to the version counters, for a replayed one.
  void bump_parameter_versions();
  // prepare_training: `comm`'s rank and ranks in layout_ (checked against a layout for several).
  void join_layout(const dist::Communicator& comm);

  ExperimentConfig cfg_;
  c10::Device device_;
  ParallelLayout layout_;
  std::shared_ptr<model::Model> model_;
  std::shared_ptr<fp8::Scaling> scaling_;
  std::string rewrite_report_;
  std::shared_ptr<const fp8::RewriteReport> rewrite_;
  std::vector<std::shared_ptr<fp8::Fp8Attention>> attention_;
  std::unique_ptr<LossScaler> loss_scaler_;
  c10::ScalarType autocast_dtype_;
  std::vector<at::Tensor> params_;
  // Expert parallelism: this rank's experts (expert_params_, by name expert_names_) and every other
  // parameter (dense_params_, dense_named_; all of params_ without expert parallelism).
  std::vector<std::string> expert_names_;
  std::vector<at::Tensor> expert_params_, dense_params_;
  std::vector<std::pair<std::string, at::Tensor>> dense_named_;
  std::unique_ptr<dist::ExpertParallel> experts_;
  std::unique_ptr<optim::AdamW> opt_;
  std::shared_ptr<dist::Communicator> comm_;
  std::unique_ptr<dist::GradientSync> grad_sync_;
  std::shared_ptr<dist::FullyShardedModel> sharded_;  // also the model's unit hooks
  std::unique_ptr<StepHealth> health_;
  int64_t steps_done_ = 0;
  std::unique_ptr<StepGraph> graph_;  // null: eager steps (graph_off_reason_ says why)
  std::string graph_off_reason_;
};

}  // namespace step
}  // namespace fp8t
