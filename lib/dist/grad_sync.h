// Data-parallel gradient averaging in buckets, overlapped with the backward pass.
//
// At construction every parameter's .grad becomes a view into one of a few flat buckets
// (about `bucket_bytes` each, filled in reverse parameter order: roughly the order in which
// the backward produces gradients), so the backward accumulates straight into the buffers that
// are all-reduced. A hook on each parameter's gradient accumulator counts the gradients a
// bucket still waits for; during an armed backward a bucket's all-reduce is launched as soon as
// it is complete and every bucket before it has been launched (the same order on all ranks).
// finish() launches the rest, waits, and divides by the world size.
//
// Usage per optimizer step: zero_grad(); backward of micro-batches 1..n-1 (not armed: they only
// accumulate locally); arm(); backward of micro-batch n; finish(); optimizer step.
//
// Sharded (ZeRO-1, dist.zero 1): every bucket is padded to a multiple of the world size and
// split into world_size equal contiguous shards; rank r owns shard r of every bucket. A
// complete bucket is reduce-scattered instead of all-reduced, so after finish() only the
// rank's own shard holds the averaged gradients (the rest of the bucket keeps this rank's
// local sums and must not be read). The optimizer updates the owned parts of the parameters
// (shard_segments()), then gather_parameters() all-gathers the updated weights, using the
// gradient buckets as the staging buffers. Usage per step: zero_grad(); ...; finish();
// optimizer step on the shard; gather_parameters(); (zero_grad() of the next step).
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <mutex>    // std::mutex
#include <vector>   // std::vector

#include "lib/dist/communicator.h"  // Communicator, Pending

namespace fp8t::dist {

class GradientSync {
 public:
  // `params`: the unique leaf parameters (tied weights listed once), all on one device, all
  // float32 or all of one dtype per bucket (a bucket never mixes dtypes).
  // `shard`: ZeRO-1 (above); the parameters must then be float32 and contiguous.
  GradientSync(std::shared_ptr<Communicator> comm, std::vector<at::Tensor> params, int64_t bucket_bytes,
               bool shard = false);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // The next backward is the last of the step: launch buckets as they complete.
  void arm();
  // Launch what is left, wait for all buckets (the current CUDA stream waits; Gloo blocks), and
  // average. Afterwards every rank holds the same gradients.
  void finish();
  // Zeroes the gradient buckets in place (the grads stay views into them).
  void zero_grad();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  bool sharded() const { return shard_; }

  // ZeRO-1: the part of a parameter this rank owns, as an element range of the flattened
  // parameter. One segment per parameter that has owned elements, in parameter order.
  struct Segment {
    size_t param = 0;    // index into the constructor's `params`
    int64_t begin = 0;   // first owned element of the flattened parameter
    int64_t length = 0;  // owned elements (> 0)
  };
  const std::vector<Segment>& shard_segments() const { return segments_; }
  // ZeRO-1: this rank's shard of every bucket (flat views, padding included: it stays zero).
  // After finish() they hold the averaged gradients of the owned segments.
  std::vector<at::Tensor> gradient_shards() const;
  // ZeRO-1: after the optimizer updated the owned segments in place, every rank receives
  // every rank's segments (one all-gather per bucket through the gradient buffers, which
  // hold garbage afterwards: zero_grad() before the next backward).
  void gather_parameters();
  // Buckets launched from inside the last armed backward (the rest were launched by finish()).
  int launched_during_backward() const { return launched_in_backward_; }

 private:
  struct Bucket {
    at::Tensor flat;                 // the gradient storage of its parameters (+ ZeRO padding)
    int64_t shard_numel = 0;         // ZeRO-1: flat.numel() / world size
    std::vector<size_t> params;      // indices into params_
    int remaining = 0;               // gradients still to arrive in this backward
    Pending pending;
  };
  void on_gradient_ready(size_t param_index);
  void launch_ready_in_order();  // with mutex_ held
  void launch(Bucket& b);
  at::Tensor own_shard(const Bucket& b) const;  // ZeRO-1: this rank's part of b.flat
  void build_segments();                        // ZeRO-1: segments_ from the bucket layout

  std::shared_ptr<Communicator> comm_;
  std::vector<at::Tensor> params_;
  std::vector<int> bucket_of_;     // per parameter
  std::vector<int64_t> offset_of_;  // per parameter: its first element in its bucket
  bool shard_ = false;
  std::vector<Segment> segments_;
  std::vector<Bucket> buckets_;
  std::vector<bool> complete_;     // per bucket, this backward
  size_t next_to_launch_ = 0;
  bool armed_ = false;
  int launched_in_backward_ = 0;
  struct Hooks;                    // the gradient accumulators and their hook keys
  std::unique_ptr<Hooks> hooks_;
  std::mutex mutex_;
};

}  // namespace fp8t::dist
