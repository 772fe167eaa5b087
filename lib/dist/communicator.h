// The data-parallel process group: LibTorch's c10d with a TCP store, NCCL for CUDA tensors and
// Gloo for CPU tensors. The c10d headers stay inside communicator.cpp and nccl_cuda.cpp.
//
// Every collective must be called by all ranks in the same order. Collectives time out after
// the timeout given to connect(): a rank that dies or stops makes the others fail with an
// error instead of waiting forever.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device

#include <chrono>   // std::chrono::seconds
#include <memory>   // std::shared_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/dist/launch.h"  // LaunchInfo

namespace fp8t::dist {

enum class ReduceOp { kSum, kMax };

// A collective in flight. wait(): for NCCL the current CUDA stream waits for it (no host
// block); for Gloo the host blocks until it is done. Throws fp8t::Error (kTrainingFailed) when
// the collective failed or timed out.
class Pending {
 public:
  Pending() = default;
  void wait();
  bool valid() const { return impl_ != nullptr; }

  struct Impl;
  explicit Pending(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

class Communicator {
 public:
  // Joins the job described by `launch` (waits up to `timeout` for the other ranks).
  // `device`: where the tensors live: CUDA selects NCCL (and makes cuda:<local_rank> current),
  // CPU selects Gloo. Throws fp8t::Error: kBadInput when the backend is not in this build,
  // kTrainingFailed when the rendezvous fails or times out.
  static std::shared_ptr<Communicator> connect(const LaunchInfo& launch, const c10::Device& device,
                                               std::chrono::seconds timeout);
  ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& backend_name() const { return backend_name_; }

  // A group of some of this job's ranks: `members` (ranks of this communicator, in the order
  // that becomes the group's ranks) must contain this rank, and every member must call this with
  // the same `tag` (unique per group: it names the group in the store) and members, in the same
  // order relative to its other subgroup() calls. Hybrid sharding's groups (lib/dist/fully_sharded.h).
  std::shared_ptr<Communicator> subgroup(const std::string& tag, const std::vector<int>& members) const;

  // In place over all ranks; `tensors` must be dense and contiguous on the communicator's device.
  Pending all_reduce_async(std::vector<at::Tensor> tensors, ReduceOp op);
  void all_reduce(const at::Tensor& tensor, ReduceOp op);
  // Reduce-scatter with SUM of flat tensors: `output` (n elements) receives elements
  // [rank * n, (rank + 1) * n) of the sum over ranks of `input` (world_size * n elements).
  // `output` may be exactly that slice of `input` (in place, as ZeRO-1 uses it).
  Pending reduce_scatter_async(const at::Tensor& output, const at::Tensor& input);
  // All-gather of flat tensors: `output` (world_size * n elements) receives every rank's `input`
  // (n elements) in rank order. `input` may be this rank's slice of `output` (in place).
  Pending all_gather_async(const at::Tensor& output, const at::Tensor& input);
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input);
  void all_gather(const at::Tensor& output, const at::Tensor& input);
  // Copies rank `root`'s tensors to every rank, in place.
  void broadcast(std::vector<at::Tensor> tensors, int root = 0);
  // All-to-all along dim 0 (expert parallelism, lib/dist/expert_parallel.h): `input` holds
  // input_splits[i] rows for rank i, consecutive in rank order; `output` receives
  // output_splits[i] rows from rank i likewise. Both contiguous; the splits' sums are their rows.
  void all_to_all(const at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& output_splits,
                  const std::vector<int64_t>& input_splits);

  struct Impl;  // the c10d objects

 private:
  Communicator() = default;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_size_ = 1;
  std::string backend_name_;
  std::chrono::seconds timeout_{0};
};

}  // namespace fp8t::dist
