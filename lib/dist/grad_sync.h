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
// split into world_size equal contiguous shards; rank r owns shard r of every bucket. The full
// buckets exist only while gradients are accumulated into them: a pre-hook on each parameter's
// gradient accumulator allocates the parameter's bucket (zeroed, from the caching allocator)
// when its first gradient of the step is about to arrive and points the bucket's .grads at
// views of it, so autograd accumulates in place as under DDP. During the armed backward a
// complete bucket is reduce-scattered into a flat shard of 1/W of its size (what the optimizer,
// the gradient norm and the non-finite check read: gradient_shards(), Segment::grad), and the
// full bucket is released two launches later, once the current stream has waited for its
// reduce-scatter (no stall: it finished while the next bucket filled); finish() releases the
// rest. The shards live from their reduce-scatter to zero_grad(), so that during the forward
// neither exists and the parameters' .grads are undefined. With accumulation (micro-batches
// 1..n-1 not armed) the full buckets persist until the armed one. The optimizer updates the
// owned parts of the parameters (shard_segments()), then gather_parameters() all-gathers the
// updated weights through transient per-bucket staging buffers (a few at a time). Usage per
// step: zero_grad(); ...; finish(); optimizer step on the shard; gather_parameters().
//
// Memory safety of a released bucket: an NCCL collective keeps its tensors alive until the
// work is waited (c10d stashes them, no recordStream), and the wait makes the current stream
// (the one the bucket was allocated on) wait for the collective, so the caching allocator can
// only hand the memory out again to work ordered after the collective. Gloo waits on the host.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <mutex>    // std::mutex
#include <vector>   // std::vector

#include "lib/dist/communicator.h"  // Communicator, Pending

namespace fp8t::dist {

class AccumulatorHooks;

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
  // DDP: zeroes the gradient buckets in place (the grads stay views into them). ZeRO-1: releases
  // any full bucket still allocated (its grads become undefined; the next backward allocates
  // zeroed ones) and the gradient shards (the next reduce-scatter allocates new ones).
  void zero_grad();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  bool sharded() const { return shard_; }

  // ZeRO-1: the part of a parameter this rank owns, as an element range of the flattened
  // parameter. One segment per parameter that has owned elements, in parameter order.
  struct Segment {
    size_t param = 0;    // index into the constructor's `params`
    int64_t begin = 0;   // first owned element of the flattened parameter
    int64_t length = 0;  // owned elements (> 0)
    at::Tensor grad;     // the averaged gradient of these elements from finish() to zero_grad():
                         // a flat tensor whose storage is this rank's shard of the parameter's
                         // bucket (the same tensor every step, re-pointed at each new shard; empty
                         // in between), so a holder such as the optimizer keeps it once
  };
  const std::vector<Segment>& shard_segments() const { return segments_; }
  // ZeRO-1: this rank's shard of every bucket (padding included: it stays zero). From finish()
  // to zero_grad() they hold the averaged gradients of the owned segments (undefined otherwise).
  std::vector<at::Tensor> gradient_shards() const;
  // ZeRO-1: after the optimizer updated the owned segments in place, every rank receives
  // every rank's segments (one all-gather per bucket into a transient staging buffer, at most
  // kGatherInFlight of them allocated at once).
  void gather_parameters();
  static constexpr size_t kGatherInFlight = 2;
  // Bytes of full gradient buckets allocated now (DDP: all of them, always; ZeRO-1: 0 after
  // finish() and between steps).
  int64_t full_bucket_bytes() const;
  // The most full buckets allocated at once since the last arm() (ZeRO-1; DDP: all of them).
  int peak_full_buckets() const { return peak_live_; }
  // Buckets launched from inside the last armed backward (the rest were launched by finish()).
  int launched_during_backward() const { return launched_in_backward_; }

 private:
  struct Bucket {
    at::Tensor flat;                 // the gradient storage of its parameters (+ ZeRO padding);
                                     // ZeRO-1: undefined while released
    at::Tensor shard;                // ZeRO-1: this rank's averaged part, reduce-scatter to zero_grad()
    int64_t numel = 0;               // of flat
    int64_t shard_numel = 0;         // ZeRO-1: numel / world size
    at::TensorOptions options;       // of flat
    std::vector<size_t> params;      // indices into params_
    std::vector<size_t> segments;    // ZeRO-1: indices into segments_
    int remaining = 0;               // gradients still to arrive in this backward
    bool launched = false;           // reduced in this armed backward (ZeRO-1: no more gradients)
    Pending pending;
  };
  void on_gradient_arriving(size_t param_index);  // ZeRO-1 pre-hook: allocate the bucket
  void on_gradient_ready(size_t param_index);
  void launch_ready_in_order();  // with mutex_ held
  void launch(Bucket& b);
  void allocate(Bucket& b);      // the full bucket, zeroed, and the grads as views into it
  void release(Bucket& b);       // ZeRO-1: after its collective; the grads become undefined
  void attach_shard(Bucket& b);   // ZeRO-1: a new shard, and the segments' grads pointed into it
  void release_shard(Bucket& b);
  void install_hooks();
  void build_segments();                        // ZeRO-1: segments_ from the bucket layout
  void gather_bucket(Bucket& b, at::Tensor& staging);  // ZeRO-1: owned segments in, launch
  void scatter_gathered(Bucket& b, const at::Tensor& staging);  // wait, copy into the parameters

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
  int live_ = 0, peak_live_ = 0;  // full buckets allocated now / at most since arm()
  std::unique_ptr<AccumulatorHooks> hooks_;
  std::mutex mutex_;
};

}  // namespace fp8t::dist
