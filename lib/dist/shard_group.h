// One shard space of a ZeRO-3 unit (lib/dist/fully_sharded.h): parameters that travel alike —
// the weights of FP8 Linears as FP8 codes, or everything else in the compute dtype — with their
// layout (lib/dist/shard_layout.h), this rank's FP32 master shard and gradient shard, and the
// buffers of a gather and of a reduction while they exist.
//
// Weights. A compute group's parameters keep their identity, shape and dtype (FP32), and their
// storage is one StorageImpl per group that they all point into: it holds no bytes while the
// group is sharded; a gather gives it the unsharded bytes (all-gathered in the compute dtype,
// then widened to FP32 when that is 16-bit) and free() takes them away again. Autograd's saved
// tensors (a weight, or a view of it such as weight.t()) share that StorageImpl, so a weight
// freed after the forward and gathered again for the backward is read there with the same
// values, and writing goes through an alias tensor, so the parameters' version counters never
// move. An FP8 group's parameters hold no bytes at all: lib/dist/fp8_gather.h gathers the FP8
// codes their layers read instead.
//
// Gradients. allocate_gradients() gives the group one zeroed FP32 buffer of the unsharded
// layout and points the parameters' .grad at views of it, so autograd accumulates in place;
// launch_reduce() reduce-scatters it (in dist.reduce_dtype) as soon as the unit's backward ends,
// and retire_reduce() adds the rank's part into the gradient shard, which accumulates over the
// micro-batches of a step (FP32, 1/N of the group) until release_gradients().
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device
#include <c10/core/Storage.h>  // c10::Storage

#include <cstdint>  // int64_t
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/dist/communicator.h"  // Communicator, Pending
#include "lib/dist/shard_layout.h"  // ShardLayout

namespace fp8t {
namespace fp8 {
class Fp8Linear;
class Scaling;
}  // namespace fp8

namespace dist {

class Fp8Gather;

// What the groups of one sharded model share.
struct ShardingContext {
  Communicator* comm = nullptr;  // the ranks that split the state: all, or this rank's shard group
  c10::Device device{c10::kCPU};
  at::ScalarType compute_dtype = at::kFloat;  // what the non-FP8 weights travel in
  at::ScalarType reduce_dtype = at::kFloat;   // what the gradients travel in (dist.reduce_dtype)
  fp8::Scaling* scaling = nullptr;            // the recipe's state; null unless fp8
  // The FP8 parts' cast is valid for this key (the recipe's weight epoch and the masters' version).
  struct WeightKey {
    int64_t epoch = -1;
    int64_t version = -1;
    bool operator==(const WeightKey& o) const { return epoch == o.epoch && version == o.version; }
  } weight_key;
  at::Tensor weight_amax;  // Scaling::WeightParts::whole_amax: [FP8 weights], reduced over the ranks
  // Bytes of gathered weights and of full gradient buffers allocated now, and their peaks.
  int64_t gathered_bytes = 0, gathered_peak = 0, grad_buffer_bytes = 0, grad_buffer_peak = 0;
};

struct GroupParam {
  std::string name;
  at::Tensor param;
  fp8::Fp8Linear* fp8 = nullptr;  // FP8 groups: the layer that reads the gathered codes
  int fp8_index = -1;             // FP8 groups: the weight's index among the model's FP8 weights
};

class ShardGroup {
 public:
  // `params` hold their full values (the master shard is copied from them); all of them have an
  // FP8 layer or none does. Afterwards they hold no bytes until a gather.
  ShardGroup(std::vector<GroupParam> params, ShardingContext& ctx);
  ~ShardGroup();
  ShardGroup(const ShardGroup&) = delete;
  ShardGroup& operator=(const ShardGroup&) = delete;

  bool fp8() const { return fp8_ != nullptr; }
  const std::vector<GroupParam>& params() const { return params_; }
  const ShardLayout& layout() const { return layout_; }
  // This rank's part of parameter k (ShardLayout::part).
  ShardLayout::Part part(size_t k) const;

  // ---- weights ----
  // Launches the all-gather(s) of the unsharded weights (FP8: casting this rank's parts first
  // when the key changed; `record` as a training cast records).
  void issue_gather(bool record);
  // Waits for them and makes the weights readable (compute: the parameters' storage; FP8: the
  // layers' GatheredWeight).
  void complete_gather();
  bool in_flight() const;  // issued, not completed
  void free();
  // FP8 groups of whole_amax recipes: max-accumulates max|part| of every owned part into
  // amax[fp8_index].
  void record_weight_amax(const at::Tensor& amax) const;

  // ---- gradients ----
  void allocate_gradients();
  bool has_gradients() const { return full_grad_.defined(); }
  void launch_reduce();
  void retire_reduce();
  bool reduce_in_flight() const { return reduce_.valid(); }
  // After the step's last retire: hybrid sharding's SUM over the replicas (when given), then
  // the gradient shard times `factor` (1 / all ranks). A group that received no gradient in the
  // step gets a zero shard.
  void launch_replica_reduce(Communicator& replicas);
  void average(double factor);
  void release_gradients();

  // ---- state ----
  const at::Tensor& master() const { return master_; }      // FP32 [shard], padding included
  const at::Tensor& grad_shard() const { return grad_shard_; }  // FP32 [shard] after finish, else undefined
  // Per parameter: its part's gradient (a flat tensor pointed into each step's gradient shard,
  // empty otherwise; the same tensor every step, so the optimizer keeps it).
  const at::Tensor& segment_grad(size_t k) const { return segment_grads_[k]; }
  // The full values of parameter k from every rank's master (a collective; tests and checks).
  std::vector<at::Tensor> gather_full() const;

 private:
  at::Tensor fill_storage(int64_t numel);
  void allocate_shard(bool zero);
  void count_gathered(int64_t bytes);
  void count_grad_buffer(int64_t bytes);

  std::vector<GroupParam> params_;
  ShardingContext& ctx_;
  ShardLayout layout_;
  at::Tensor master_;
  std::vector<at::Tensor> segment_grads_;
  // Compute groups: the StorageImpl the parameters point into, its alias and the gather in flight.
  c10::Storage storage_;
  at::Tensor send_, wire_;
  Pending gather_;
  std::unique_ptr<Fp8Gather> fp8_;
  // Gradients.
  at::Tensor full_grad_, wire_grad_, reduced_, grad_shard_;
  bool accumulate_ = false;  // retire adds reduced_ into grad_shard_ (else it was reduced straight into it)
  Pending reduce_, replica_;
};

}  // namespace dist
}  // namespace fp8t
