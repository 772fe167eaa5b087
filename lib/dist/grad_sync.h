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
  GradientSync(std::shared_ptr<Communicator> comm, std::vector<at::Tensor> params, int64_t bucket_bytes);
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
  // Buckets launched from inside the last armed backward (the rest were launched by finish()).
  int launched_during_backward() const { return launched_in_backward_; }

 private:
  struct Bucket {
    at::Tensor flat;                 // the gradient storage of its parameters
    std::vector<size_t> params;      // indices into params_
    int remaining = 0;               // gradients still to arrive in this backward
    Pending pending;
  };
  void on_gradient_ready(size_t param_index);
  void launch_ready_in_order();  // with mutex_ held
  void launch(Bucket& b);

  std::shared_ptr<Communicator> comm_;
  std::vector<at::Tensor> params_;
  std::vector<int> bucket_of_;     // per parameter
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
