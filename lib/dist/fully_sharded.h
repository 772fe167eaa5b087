// Fully sharded data parallelism (ZeRO-3, dist.zero 3) of a model::Model. lib/dist/README.md has
// the design: units, streams and the lifetime of every buffer.
//
// The state is split across the N ranks of a shard group (all ranks, or groups of
// dist.shard_group_size consecutive ranks with the state replicated across the groups): each
// rank keeps 1/N of the FP32 master weights, of the gradients and (through the optimizer's
// segments()) of the AdamW moments. The unit of gathering is one of the model's units
// (model::Model::unit_of): for the GPT family one transformer block, and the embeddings and the
// head as units of their own. The model calls the unit hooks (lib/model/unit_hooks.h): before a
// unit's forward its weights are gathered (FP8 Linears' as FP8 codes, lib/dist/fp8_gather.h; the
// rest in the compute dtype), after it they are freed (dist.reshard_after_forward; the last unit,
// the head, whose backward follows at once, stays); an autograd
// node at the unit's output gathers them again when the unit's backward begins; when the
// unit's last gradient has arrived its gradients are reduce-scattered and its weights freed.
// The next unit's gather is issued while the current one computes (dist.prefetch units ahead,
// in the forward and in the backward).
//
// Per step: forward/backward of every micro-batch (the hooks do the rest; each micro-batch's
// gradients are reduce-scattered and summed into the FP32 gradient shard), finish(), the
// optimizer on segments(), parameters_updated(), zero_grad(). Between steps the parameters hold
// no bytes: read them with gather_full_parameters(), write them through the segments' masters.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr, std::unique_ptr
#include <mutex>    // std::mutex
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/dist/communicator.h"  // Communicator
#include "lib/dist/shard_group.h"   // ShardingContext
#include "lib/model/unit_hooks.h"   // model::UnitHooks

namespace fp8t {
namespace fp8 {
class Scaling;
}  // namespace fp8
namespace model {
class Model;
}  // namespace model

namespace dist {

class AccumulatorHooks;

// The ranks per shard group that dist.shard_group_size asks for in a job of `world` ranks with
// `local_world` per node (LOCAL_WORLD_SIZE): 0 = all of them, -1 = one group per node, else the
// value. Throws fp8t::Error (kBadInput, naming the key) when it does not divide the job.
int resolve_shard_group_size(int64_t configured, int world, int local_world);

class FullyShardedModel : public model::UnitHooks {
 public:
  struct Options {
    bool reshard_after_forward = true;
    at::ScalarType compute_dtype = at::kFloat;  // the session's autocast dtype
    at::ScalarType reduce_dtype = at::kFloat;
    int64_t prefetch = 1;
    int shard_group_size = 0;  // resolved (resolve_shard_group_size); 0 = the whole job
  };
  // The model's parameters must hold their full values, identical on every rank (broadcast
  // first); afterwards they hold none. `scaling`: the FP8 recipe's state, or null. The caller
  // installs this as the model's unit hooks.
  FullyShardedModel(std::shared_ptr<Communicator> comm, model::Model& model, fp8::Scaling* scaling,
                    const Options& options);
  ~FullyShardedModel() override;
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  // ---- model::UnitHooks ----
  void before_forward(int unit) override;
  std::vector<at::Tensor> after_forward(int unit, std::vector<at::Tensor> outputs) override;
  // From the autograd node at a unit's output, when the unit's backward begins.
  void pre_backward(int unit);

  // ---- the step ----
  // After the last micro-batch's backward: every unit's gradients reduced, summed over the
  // shard groups (hybrid) and averaged over all ranks in the gradient shards.
  void finish();
  // After the optimizer wrote the masters: the FP8 parts are cast again at the next gather.
  void parameters_updated();
  // Releases the gradient shards (between steps no gradient buffer exists).
  void zero_grad();
  // Frees every gathered unit (after a forward that had no backward).
  void release_all();

  // ---- the state ----
  // What this rank's optimizer updates: the parts of the parameters it owns (element ranges of
  // the flattened parameter), their FP32 masters (views of the master shards) and gradients.
  struct Segment {
    std::string name;
    int64_t begin = 0;
    int64_t length = 0;
    at::Tensor master;
    at::Tensor grad;  // valid from finish() to zero_grad()
  };
  std::vector<Segment> segments() const;
  std::vector<at::Tensor> gradient_shards() const;  // from finish() to zero_grad()
  Communicator& shard_communicator() const { return *shard_comm_; }
  int shard_group_size() const { return shard_comm_->world_size(); }
  int shard_group_index() const { return comm_->rank() / shard_group_size(); }
  int num_units() const { return static_cast<int>(units_.size()); }
  // Every parameter's full FP32 values by name (collective over the shard group; on the CPU).
  std::vector<std::pair<std::string, at::Tensor>> gather_full_parameters() const;

  // Bytes this rank holds: the master shards, the FP8 parts' cache, and the most gathered
  // weights and full gradient buffers that were allocated at once.
  struct Bytes {
    int64_t master = 0;
    int64_t gathered_peak = 0;
    int64_t grad_buffer_peak = 0;
    int64_t grad_shards = 0;  // all of them (allocated from the first reduction to zero_grad)
  };
  Bytes bytes() const;
  // Units reduce-scattered from inside the backward in the last step (the rest by finish).
  int reduced_in_backward() const { return reduced_in_last_step_; }

 private:
  struct Unit;
  void build_units(model::Model& model);
  void install_hooks();
  const std::vector<int>& region_units(int region) const;
  void refresh_weight_key();
  void issue(int unit, bool record);
  void ensure(int region, bool record);
  void free_unit(int unit);
  void on_gradient_arriving(int unit);
  void on_gradient_ready(int unit);
  void launch_reduce(int unit);
  void flush_reductions();

  std::shared_ptr<Communicator> comm_, shard_comm_, replica_comm_;
  Options options_;
  ShardingContext ctx_;
  int head_ = 0;                          // the last unit: its backward follows its forward
  std::vector<std::vector<int>> reads_;  // reads_[u]: the units whose weights unit u reads
  int num_fp8_ = 0;
  std::vector<std::unique_ptr<Unit>> units_;
  std::unique_ptr<AccumulatorHooks> hooks_;
  int64_t master_version_ = 0;
  int last_launched_ = -1;
  int reduced_in_backward_ = 0, reduced_in_last_step_ = 0;
  std::mutex mutex_;
};

}  // namespace dist
}  // namespace fp8t
