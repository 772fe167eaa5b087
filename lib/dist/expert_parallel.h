// Expert parallelism (dist.expert_parallel N, moe.experts > 0): the ranks form expert groups of N
// consecutive ranks; within a group, rank j holds experts [j * E / N, (j + 1) * E / N) of every MoE
// block (model::Model::keep_experts) and tokens travel to their experts' ranks by all-to-all
// (model::ExpertExchange, implemented here over the group's communicator). The ranks that hold the
// same experts in different groups (replicas: world / N of them) average those experts' gradients
// among themselves; every other parameter is data-parallel over all ranks as usual (DDP or ZeRO-1).
//
// Gradients. Expert e's gradient on its rank already sums the gradients of every group member's
// tokens routed to e (the backward of the all-to-all brings them back). The data-parallel loss is
// the mean over all W ranks, so the expert gradients are summed over the replicas and divided by
// W: the gradient data parallelism would give. The global gradient norm adds each group's expert
// squares once (a sum over the expert group).
//
// The split sizes of the all-to-all are read on the host (one small exchange of counts per MoE
// block and pass): a step with expert parallelism runs eagerly, not as one CUDA graph.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <vector>   // std::vector

#include "lib/dist/communicator.h"      // Communicator
#include "lib/model/expert_exchange.h"  // model::ExpertExchange

namespace fp8t::dist {

class ExpertParallel {
 public:
  // `comm`: every rank of the job; `group_size`: dist.expert_parallel (it must divide the ranks:
  // fp8t::Error kBadInput naming the key otherwise). Forms the expert group and the replica group
  // (collectives: every rank calls this at the same point).
  ExpertParallel(std::shared_ptr<Communicator> comm, int64_t group_size);

  int group_size() const { return group_->world_size(); }
  int group_rank() const { return group_->rank(); }
  int replicas() const { return replicas_ ? replicas_->world_size() : 1; }
  // The experts this rank keeps of `experts` per MoE block: [first, first + count).
  int64_t first_expert(int64_t experts) const { return group_rank() * (experts / group_size()); }
  int64_t expert_count(int64_t experts) const { return experts / group_size(); }

  // The all-to-all of the expert group, for the model.
  c10::intrusive_ptr<model::ExpertExchange> exchange() const;

  // The same expert weights on every replica: the first replica's (after the model was built).
  void broadcast_experts(const std::vector<at::Tensor>& experts);
  // After the backward: each expert gradient summed over the replicas and divided by the job's
  // ranks (the header's rule). Gradients undefined are skipped.
  void reduce_gradients(const std::vector<at::Tensor>& experts);
  // The squared L2 norm of this rank's expert gradients summed over the expert group (0-d float32):
  // every expert counted once.
  at::Tensor squared_norm(const std::vector<at::Tensor>& experts);
  // A rank's experts of one parameter, gathered along dim 0 into the whole parameter (the group's
  // ranks in order; checkpoints); `local` is this rank's [E / N, ...] part.
  at::Tensor gather(const at::Tensor& local);

 private:
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Communicator> group_;     // the expert group (N consecutive ranks)
  std::shared_ptr<Communicator> replicas_;  // the ranks holding the same experts; null when 1
};

}  // namespace fp8t::dist
