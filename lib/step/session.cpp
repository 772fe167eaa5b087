#include "lib/step/session.h"

#include <ATen/autocast_mode.h>  // at::autocast::set_autocast_cache_enabled
#include <torch/torch.h>         // torch::manual_seed, torch::NoGradGuard
#include <c10/util/Exception.h>  // c10::OutOfMemoryError
#include <spdlog/spdlog.h>       // spdlog::info, spdlog::warn

#include <algorithm>  // std::find
#include <atomic>     // std::atomic

#include "lib/dist/communicator.h"            // dist::Communicator
#include "lib/dist/expert_parallel.h"         // dist::ExpertParallel
#include "lib/dist/fully_sharded.h"           // dist::FullyShardedModel
#include "lib/dist/grad_sync.h"               // dist::GradientSync
#include "lib/fp8/layers/fp8_attention.h"     // fp8::Fp8Attention, fp8::attention_summary
#include "lib/fp8/recipes/delayed_scaling.h"  // fp8::DelayedScaling
#include "lib/fp8/rewrite.h"                  // fp8::rewrite_to_fp8
#include "lib/model/attention_backend.h"      // model::select_attention_backend
#include "lib/model/model.h"                  // model::Model, model::build
#include "lib/optim/grad_clip.h"              // global_grad_norm, sharded_grad_norm, clip_divisor
#include "lib/step/loss_scaler.h"             // LossScaler
#include "lib/optim/optimizer.h"              // AdamW
#include "lib/plan/resources.h"               // throw_out_of_memory, maybe_inject_out_of_memory
#include "lib/dist/launch.h"                  // dist::launch_info_from_environment
#include "lib/step/step_health.h"             // StepHealth
#include "lib/util/error.h"                   // FP8T_CHECK
#include "lib/util/memory.h"                  // release_cached_memory
#include "lib/util/torch_compat.h"            // compat::AutocastGuard
#if defined(FP8T_WITH_CUDA)
#include "lib/gemm/gemm_engine.h"  // gemm::GemmEngine::set_autotune
#endif

namespace fp8t {
namespace step {

namespace {

c10::ScalarType autocast_dtype_for(const ExperimentConfig& cfg, const c10::Device& device) {
  // FP8 runs keep everything outside the FP8 GEMMs in BF16 on the GPU (as TE does under
  // autocast); on the CPU emulation it is FP32 so that only the FP8 casts differ from fp32.
  if (cfg.precision == Precision::kBf16) return at::kBFloat16;
  if (cfg.precision == Precision::kFp16) return at::kHalf;  // FP16 AMP, on the CPU too
  if (cfg.precision == Precision::kFp8 && device.is_cuda()) return at::kBFloat16;
  return at::kFloat;
}

// ZeRO-1: the element ranges of the parameters (by name) this rank's optimizer updates, and
// where their averaged gradients are (views into the rank's gradient shards: the full .grads
// are released after the backward).
optim::ShardRanges shard_ranges(const optim::NamedParameters& named, const dist::GradientSync& sync,
                                std::map<std::string, at::Tensor>& grads) {
  optim::ShardRanges ranges;
  for (const auto& seg : sync.shard_segments()) {
    ranges[named.at(seg.param).first] = optim::ParamRange{seg.begin, seg.length};
    grads[named.at(seg.param).first] = seg.grad;
  }
  return ranges;
}

// Processes per node (LOCAL_WORLD_SIZE) of a job of `world` ranks: hybrid sharding's groups.
int local_world_size(int world) {
  const dist::LaunchInfo launch = dist::launch_info_from_environment();
  return launch.launched ? launch.local_world_size : world;
}

// ZeRO-3: the optimizer on the segments of the sharded model (the rank's parts, their masters
// and gradients).
std::unique_ptr<optim::AdamW> sharded_optimizer(const model::Model& net, const dist::FullyShardedModel& sharded,
                                                const optim::AdamWOptions& options) {
  optim::ShardRanges ranges;
  std::map<std::string, at::Tensor> grads, masters;
  for (const auto& seg : sharded.segments()) {
    ranges[seg.name] = optim::ParamRange{seg.begin, seg.length};
    grads[seg.name] = seg.grad;
    masters[seg.name] = seg.master;
  }
  return std::make_unique<optim::AdamW>(net.unique_named_parameters(), options, ranges, grads, masters);
}

// ZeRO-3: autocast's weight-cast cache would keep a 16-bit copy of every weight from its unit's
// forward to the end of the step (the gathered weights are freed after the forward): off.
class AutocastCacheOff {
 public:
  explicit AutocastCacheOff(bool on) : active_(on), previous_(at::autocast::is_autocast_cache_enabled()) {
    if (active_) at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() {
    if (active_) at::autocast::set_autocast_cache_enabled(previous_);
  }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool active_;
  bool previous_;
};

}  // namespace

Session::Session(const ExperimentConfig& cfg, const c10::Device& device)
    : Session(cfg, device, nullptr, ParallelLayout::of(cfg.dist)) {}

Session::Session(const ExperimentConfig& cfg, const c10::Device& device, const ParallelLayout& layout)
    : Session(cfg, device, nullptr, layout) {}

Session::Session(const ExperimentConfig& cfg, const c10::Device& device, std::shared_ptr<model::Model> model)
    : Session(cfg, device, std::move(model), ParallelLayout::of(cfg.dist)) {}

Session::Session(const ExperimentConfig& cfg, const c10::Device& device, std::shared_ptr<model::Model> model,
                 const ParallelLayout& layout)
    : cfg_(cfg),
      device_(device),
      layout_(layout),
      model_(std::move(model)),
      autocast_dtype_(autocast_dtype_for(cfg, device)) {
  try {
    build();
  } catch (const c10::OutOfMemoryError& e) {  // exit 2 with the estimate and the levers, no trace
    model_.reset();
    plan::throw_out_of_memory(cfg_, layout_, "building the model", e.what_without_backtrace());
  }
}

void Session::build() {
  plan::maybe_inject_out_of_memory("build");
  torch::manual_seed(cfg_.run.seed);
  if (!model_) model_ = model::build(cfg_.model);  // else built by the caller
  keep_this_ranks_experts();  // dist.expert_parallel: before the model takes device memory
  model_->to(device_);
  model_->set_recompute(cfg_.train.recompute);  // activations recomputed in the backward (lib/model/recompute.h)
  model_->set_loss_chunk_bytes(cfg_.train.loss_chunk_mib << 20);
  model_->set_micro_batches(cfg_.train.grad_accum_steps);  // the gradient scale of a family's own loss terms
#if defined(FP8T_WITH_CUDA)
  // train.gemm_autotune: lib/gemm times each new GEMM plan's candidate algorithms (process-wide).
  if (device_.is_cuda()) gemm::GemmEngine::instance().set_autotune(cfg_.train.gemm_autotune);
#endif
  // train.attention_backend: the SDPA kernel ATen tries first (process-wide; CUDA only).
  const model::AttentionChoice attention = model::select_attention_backend(
      cfg_.train.attention_backend, device_, cfg_.model.seq_len, cfg_.train.cuda_graphs);
  static std::atomic<bool> attention_warned{false};  // once per process: bench builds a Session per row
  if (!attention.replaced.empty() && !attention_warned.exchange(true)) spdlog::warn("{}", attention.replaced);
  if (device_.is_cuda()) {
    spdlog::debug("attention: {} first (train.attention_backend)", model::attention_backend_name(attention.backend));
  }
  if (cfg_.precision == Precision::kFp8) {
    auto rewritten = fp8::rewrite_to_fp8(*model_, cfg_.fp8, device_);
    scaling_ = rewritten.scaling;
    rewrite_report_ = rewritten.report.to_string();
    rewrite_ = std::make_shared<const fp8::RewriteReport>(std::move(rewritten.report));
    attention_ = std::move(rewritten.attention);
  }
  if (cfg_.precision == Precision::kFp16) {
    loss_scaler_ = std::make_unique<LossScaler>(LossScalerOptions::from(cfg_.train), device_);
  }
  for (const auto& np : model_->unique_named_parameters()) {
    params_.push_back(np.second);
    const bool expert = std::find(expert_names_.begin(), expert_names_.end(), np.first) != expert_names_.end();
    (expert ? expert_params_ : dense_params_).push_back(np.second);
    if (!expert) dense_named_.push_back(np);
  }
}

void Session::keep_this_ranks_experts() {
  const int64_t n = cfg_.dist.expert_parallel;
  if (n <= 1 || !layout_.is_distributed()) return;
  FP8T_INPUT_CHECK(layout_.world_size % n == 0, "dist.expert_parallel = ", n, " does not divide the job's ",
                   layout_.world_size, " ranks; expected a divisor (torchrun --nproc-per-node)");
  FP8T_INPUT_CHECK(!layout_.shards_optimizer_state(), "dist.expert_parallel = ", n, " with dist.zero ",
                   layout_.zero_level(), ": expert parallelism runs with dist.zero 0 (the other weights DDP) in this "
                   "version; ZeRO-1 and ZeRO-3 would also have to shard the experts' state, which fp8train does not do "
                   "yet (use dist.expert_parallel 1 with ZeRO)");
  const int64_t local = cfg_.model.moe.experts / n;
  expert_names_ = model_->keep_experts((layout_.rank % n) * local, local);
}

Session::~Session() {
  if (model_) model_->set_unit_hooks(nullptr);  // the sharded model goes before the model it hooks
}

optim::AdamW& Session::optimizer() {
  FP8T_CHECK(opt_, "Session::prepare_training was not called");
  return *opt_;
}

StepHealth& Session::health() {
  FP8T_CHECK(health_, "Session::prepare_training was not called");
  return *health_;
}

std::string Session::fp8_attention_summary() const { return fp8::attention_summary(attention_); }

const optim::AdamW& Session::optimizer() const {
  FP8T_CHECK(opt_, "Session::prepare_training was not called");
  return *opt_;
}

void Session::prepare_training(std::shared_ptr<dist::Communicator> comm) {
  FP8T_CHECK(!opt_, "Session::prepare_training called twice");
  if (comm) join_layout(*comm);
  try {
    allocate_training_state(std::move(comm));
  } catch (const c10::OutOfMemoryError& e) {
    opt_.reset();
    grad_sync_.reset();
    if (sharded_) model_->set_unit_hooks(nullptr);
    sharded_.reset();
    plan::throw_out_of_memory(cfg_, layout_, "allocating the gradients and the optimizer state",
                              e.what_without_backtrace());
  }
}

void Session::join_layout(const dist::Communicator& comm) {
  FP8T_CHECK(!layout_.is_distributed() || (layout_.rank == comm.rank() && layout_.world_size == comm.world_size()),
             "Session: built for rank ", layout_.rank, " of ", layout_.world_size, ", prepared on rank ", comm.rank(),
             " of ", comm.world_size());
  layout_.rank = comm.rank();
  layout_.world_size = comm.world_size();
}

void Session::allocate_training_state(std::shared_ptr<dist::Communicator> comm) {
  comm_ = std::move(comm);
  if (comm_) {
    if (!expert_params_.empty()) {  // dist.expert_parallel: the experts' groups and the token exchange
      experts_ = std::make_unique<dist::ExpertParallel>(comm_, cfg_.dist.expert_parallel);
      model_->set_expert_exchange(experts_->exchange());
    }
    {
      torch::NoGradGuard no_grad;
      comm_->broadcast(dense_params_, 0);  // identical starting weights whatever each rank's RNG did
      if (experts_) experts_->broadcast_experts(expert_params_);  // each expert's replicas alike
    }
    const auto bucket_bytes = static_cast<int64_t>(cfg_.dist.bucket_mb * 1024.0 * 1024.0);
    if (layout_.shards_weights()) {
      shard_model();
    } else {
      grad_sync_ = std::make_unique<dist::GradientSync>(comm_, dense_params_, std::max<int64_t>(bucket_bytes, 1),
                                                        /*shard=*/layout_.shards_optimizer_state());
    }
    if (scaling_ && cfg_.fp8.reduce_amax) {  // fp8.reduce_amax false: every rank keeps its own scales
      dist::Communicator* c = comm_.get();
      scaling_->set_amax_reducer([c](at::Tensor& row0) { c->all_reduce(row0, dist::ReduceOp::kMax); });
    }
  }
  if (sharded_) {  // ZeRO-3: the rank's segments, their masters in the master shards
    opt_ = sharded_optimizer(*model_, *sharded_, optim::AdamWOptions::from(cfg_.train));
  } else if (grad_sync_ && grad_sync_->sharded()) {  // ZeRO-1: moments for this rank's segments only
    std::map<std::string, at::Tensor> shard_grads;
    const optim::ShardRanges ranges = shard_ranges(dense_named_, *grad_sync_, shard_grads);
    opt_ = std::make_unique<optim::AdamW>(model_->unique_named_parameters(), optim::AdamWOptions::from(cfg_.train), ranges,
                                          shard_grads);
  } else {
    opt_ = std::make_unique<optim::AdamW>(model_->unique_named_parameters(), optim::AdamWOptions::from(cfg_.train));
  }
  health_ = std::make_unique<StepHealth>(device_, std::max<int64_t>(cfg_.train.max_skipped_steps, 1));
  set_up_cuda_graph();
}

void Session::shard_model() {
  dist::FullyShardedModel::Options o;
  o.reshard_after_forward = cfg_.dist.reshard_after_forward;
  o.compute_dtype = autocast_dtype_;
  o.reduce_dtype = cfg_.dist.reduce_dtype == ReduceDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  o.prefetch = cfg_.dist.prefetch;
  const int world = comm_->world_size();
  o.shard_group_size = dist::resolve_shard_group_size(cfg_.dist.shard_group_size, world, local_world_size(world));
  sharded_ = std::make_shared<dist::FullyShardedModel>(comm_, *model_, scaling_.get(), o);
  model_->set_unit_hooks(sharded_);
}

at::Tensor Session::step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                         const std::function<void(const char*)>& mark, int64_t step_number) {
  FP8T_CHECK(opt_, "Session::prepare_training was not called");
  if (steps_done_++ > 0) return train_step(next_batch, lr, loss_sum, mark, step_number);
  // The first step allocates the activations, the FP8 copies and the workspaces: running out of
  // memory there means the config does not fit (later, it is an error like any other).
  try {
    plan::maybe_inject_out_of_memory("step");
    return train_step(next_batch, lr, loss_sum, mark, step_number);
  } catch (const c10::OutOfMemoryError& e) {
    plan::throw_out_of_memory(cfg_, layout_, "running the first training step", e.what_without_backtrace());
  }
}

at::Tensor Session::train_step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                               const Mark& mark, int64_t step_number) {
  if (graph_ && graph_->ready()) return graph_step(next_batch, lr, loss_sum, mark, step_number);
  if (graph_) graph_->count_eager_step();
  return eager_step([&](int64_t) { return next_batch(); }, lr, loss_sum, mark, step_number);
}

at::Tensor Session::eager_step(const MicroBatch& micro_batch, double lr, at::Tensor& loss_sum, const Mark& mark,
                               int64_t step_number) {
  const StepOutputs out = update_step(forward_backward(micro_batch, mark), StepLr{lr, at::Tensor()}, mark,
                                      /*scale_update=*/true);
  loss_sum += out.applied_loss;
  health_->end_step(step_number);
  return out.grad_norm;
}

at::Tensor Session::graph_step(const std::function<data::Batch()>& next_batch, double lr, at::Tensor& loss_sum,
                               const Mark& mark, int64_t step_number) {
  std::vector<data::Batch> batches;
  for (int64_t m = 0; m < cfg_.train.grad_accum_steps; ++m) batches.push_back(next_batch());
  StepOutputs out;
  try {
    out = graph_->run(batches, lr, [this](const MicroBatch& micro_batch, const at::Tensor& lr_device) {
      const at::Tensor step_loss = forward_backward(micro_batch, {});
      maybe_inject_capture_failure();  // tests: a capture that fails half-way
      return update_step(step_loss, StepLr{0.0, lr_device}, {}, /*scale_update=*/false);
    });
  } catch (const Error& e) {  // a failed capture or a batch of another shape: this step and the rest run eagerly
    drop_graph(e.what());
    return eager_step([&](int64_t m) { return batches.at(static_cast<size_t>(m)); }, lr, loss_sum, mark,
                      step_number);
  }
  // Host state of the step, after the replay (lib/step/step_graph.h): the FP8 scale update
  // (its counters and the weight cache's epoch), the skip counters, the caller's loss sum.
  if (scaling_) scaling_->end_micro_batch(/*last_of_step=*/true, health_->found_inf());
  health_->end_step(step_number);
  loss_sum += out.applied_loss;
  bump_parameter_versions();
  if (mark) mark("graph");
  return out.grad_norm.clone();  // the graph's own tensor is overwritten by the next replay
}

at::Tensor Session::forward_backward(const MicroBatch& micro_batch, const Mark& mark) {
  auto phase = [&](const char* name) {
    if (mark) mark(name);
  };
  const int64_t micro_batches = cfg_.train.grad_accum_steps;
  at::Tensor step_loss = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  health_->begin_step();  // producers below (and e.g. a loss scaler) may set found_inf
  compat::AutocastGuard autocast(device_.type(), autocast_dtype_);
  const AutocastCacheOff no_weight_cache(sharded_ != nullptr);
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    const data::Batch b = micro_batch(micro);
    if (grad_sync_ && micro + 1 == micro_batches) grad_sync_->arm();  // reduce during the last backward
    at::Tensor h = model_->hidden(b.inputs.to(device_, /*non_blocking=*/true));
    phase("forward");
    // The head and the loss; bf16/fp8: chunked, the head's gradients made here and h not kept
    // (lib/ops/linear_cross_entropy.h), so it is dropped before the backward.
    const at::Tensor loss = model_->head_loss(h, b.targets.to(device_, /*non_blocking=*/true));
    h.reset();
    phase("loss");
    const at::Tensor micro_loss = loss / static_cast<double>(micro_batches);
    // fp16: the backward runs on loss * S, so that small FP16 activation gradients survive.
    (loss_scaler_ ? loss_scaler_->scale_loss(micro_loss) : micro_loss).backward();
    step_loss += loss.detach();
    phase("backward");
    // fp8.amax_update microbatch: a scale update after every micro-batch (a no-op for `step`).
    if (scaling_ && micro + 1 < micro_batches) scaling_->end_micro_batch(/*last_of_step=*/false);
  }
  return step_loss;
}

StepOutputs Session::update_step(const at::Tensor& step_loss, const StepLr& lr, const Mark& mark,
                                 bool scale_update) {
  auto phase = [&](const char* name) {
    if (mark) mark(name);
  };
  if (grad_sync_) grad_sync_->finish();  // gradients now averaged over the ranks
  if (sharded_) sharded_->finish();
  if (experts_) experts_->reduce_gradients(expert_params_);  // over their replicas, / the ranks
  phase("grad_sync");
  // ZeRO-1 and ZeRO-3: each rank holds the averaged gradients of its shard only; one all-reduce of
  // the squared norms (over the shard group: the groups hold the same shards) gives the global
  // norm, identical on every rank.
  const bool zero = grad_sync_ && grad_sync_->sharded();
  at::Tensor grad_norm = sharded_ ? optim::sharded_grad_norm(sharded_->gradient_shards(), sharded_->shard_communicator())
                         : zero   ? optim::sharded_grad_norm(grad_sync_->gradient_shards(), *comm_)
                                  : optim::global_grad_norm(dense_params_);
  // Expert parallelism: each expert group's experts counted once, on every rank.
  if (experts_) grad_norm = (grad_norm.to(at::kFloat).pow(2) + experts_->squared_norm(expert_params_)).sqrt();
  if (loss_scaler_) {  // fp16: the norm of the unscaled gradients; inf/NaN gradients skip the step
    grad_norm = loss_scaler_->unscale_norm(grad_norm);
    health_->flag(loss_scaler_->found_inf());
  }
  // The skip decision, on the device. The gradient norm is identical on every rank (the grads
  // are averaged); the loss is rank-local, so only a single process checks it directly.
  health_->flag_non_finite(grad_norm);
  if (!comm_) health_->flag_non_finite(step_loss);
  phase("clip");
  // Scales for the next step (amax MAX over ranks first). In `step` mode a skipped step's amaxes
  // (possibly inf) do not enter the history; `microbatch` mode keeps them, as TE does.
  if (scaling_ && scale_update) scaling_->end_micro_batch(/*last_of_step=*/true, health_->found_inf());
  phase("fp8_update");
  // Clipping is folded into the optimizer: AdamW divides the gradients by the clip divisor
  // as it reads them (one pass over the gradients fewer than scaling them first).
  // fp16: the unscale is folded in too (AdamW divides by S times the clip divisor).
  at::Tensor divisor = cfg_.train.grad_clip > 0.0 ? optim::clip_divisor(grad_norm, cfg_.train.grad_clip) : at::Tensor();
  if (loss_scaler_) divisor = loss_scaler_->grad_divisor(divisor);
  if (lr.device.defined()) {
    opt_->step(lr.device, divisor, health_->found_inf());
  } else {
    opt_->step(lr.value, divisor, health_->found_inf());
  }
  end_model_step();  // state the model updates once per step (a router's selection bias)
  if (zero) grad_sync_->gather_parameters();  // every rank's updated segments to every rank
  if (sharded_) sharded_->parameters_updated();  // ZeRO-3: the next gathers cast the new masters
  if (loss_scaler_) loss_scaler_->update();  // backoff or growth of S, GradScaler's rules
  const StepOutputs out{grad_norm, health_->unless_skipped(step_loss)};
  if (grad_sync_) {
    grad_sync_->zero_grad();  // DDP: the grads stay views into the buckets; ZeRO-1: released already
    for (at::Tensor& p : expert_params_) p.mutable_grad().reset();  // dist.expert_parallel: outside the buckets
  } else if (sharded_) {
    sharded_->zero_grad();  // ZeRO-3: the gradient shards go
  } else {
    opt_->zero_grad();
  }
  phase("optimizer");
  return out;
}

void Session::end_model_step() {
  std::vector<at::Tensor> counts = model_->step_counts();
  if (comm_) {
    for (at::Tensor& t : counts) comm_->all_reduce(t, dist::ReduceOp::kSum);  // every rank's tokens
  }
  model_->end_step(health_->found_inf());
}

void Session::set_up_cuda_graph() {
  graph_off_reason_ = cuda_graph_fallback_reason(cfg_, device_, comm_ ? comm_->world_size() : 0);
  if (graph_off_reason_.empty()) {
    graph_ = std::make_unique<StepGraph>(device_, cfg_.train.grad_accum_steps);
    spdlog::info("CUDA graphs: on; the training step is captured after {} eager steps and replayed",
                 StepGraph::kWarmupSteps);
  } else if (cfg_.train.cuda_graphs && device_.is_cuda()) {
    spdlog::info("CUDA graphs: off, {}; the training step runs eagerly", graph_off_reason_);
  } else {
    spdlog::debug("CUDA graphs: off, {}", graph_off_reason_);
  }
}

void Session::drop_graph(const std::string& why) {
  spdlog::warn("CUDA graphs: off from here on: {}; the training step runs eagerly", why);
  graph_off_reason_ = why;
  // A failed capture executed nothing but left a step's host state: gradients in the graph's
  // pool and FP8 weight copies cached for the current weight versions (never written).
  opt_->zero_grad();
  bump_parameter_versions();
  graph_.reset();  // the graph and its memory pool
  release_cached_memory(device_);
}

void Session::bump_parameter_versions() {
  for (const at::Tensor& p : params_) p.unsafeGetTensorImpl()->bump_version();
}

at::Tensor Session::eval_loss_sum(const std::function<data::Batch(int64_t)>& batch, int64_t batches) {
  model_->eval();
  torch::NoGradGuard no_grad;
  compat::AutocastGuard autocast(device_.type(), autocast_dtype_);
  at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  for (int64_t i = 0; i < batches; ++i) {
    const data::Batch b = batch(i);
    total += model_->forward_loss(b.inputs.to(device_), b.targets.to(device_));  // bf16/fp8: chunked, loss only
  }
  if (sharded_) sharded_->release_all();
  model_->train();
  return total;
}

}  // namespace step
}  // namespace fp8t
