// The common part of the recipes whose scales come with each cast, many per tensor (block,
// rowwise): no history, no update, no cross-rank reduction, nothing to checkpoint (a resumed run
// computes the same scales from the same tensors); weights cast once per optimizer step
// (weight_epoch counts the steps); statistics per slot: the amax and the largest scale of its last
// measured cast, and the smallest and largest scale of the current log interval, which the state
// classes record with record_range() and which amax_history() / scale() / scale_inv() /
// read_stats() report.
#pragma once

#include <map>     // std::map
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/recipes/scaling.h"  // Scaling

namespace fp8t {
namespace fp8 {

class PerCastScaling : public Scaling {
 public:
  using Scaling::Scaling;

  void end_micro_batch(bool last_of_step, const at::Tensor& /*skip*/ = at::Tensor()) override {
    if (last_of_step) ++steps_ended_;
  }
  int64_t weight_epoch() const override { return steps_ended_; }

  std::vector<SlotStats> read_stats() override;
  // Current scaling of the whole tensor (Scaling::quantize_per_tensor): these recipes' many
  // scales per tensor do not fit a consumer that takes one.
  Fp8Tensor quantize_per_tensor(int slot, const CastSource& src, const CastOptions& opt) override;

  // [1, S] / [S] / [S]: the amax, the largest scale and its inverse of each slot's last measured
  // cast (zeros and ones until statistics are collected).
  const at::Tensor& amax_history() const override { return amax_rows_; }
  const at::Tensor& scale() const override { return scale_; }
  const at::Tensor& scale_inv() const override { return scale_inv_; }

  std::map<std::string, at::Tensor> state_dict() const override { return {}; }
  void load_state_dict(const std::map<std::string, at::Tensor>& /*state*/) override {}

 protected:
  void allocate(const at::Device& device) override;
  // One measured cast of `slot`: st = {saturated, underflow, smallest scale, largest scale, amax}
  // (float32 [5] on the device: block_cast_stats, rowwise_cast_stats).
  void record_range(int slot, const at::Tensor& st);

 private:
  at::Tensor amax_, scale_, scale_inv_, amax_rows_;  // [S] (amax_rows_: amax_ viewed as [1, S])
  at::Tensor interval_min_, interval_max_;          // [S]: scales since the last read_stats
  int64_t steps_ended_ = 0;
};

}  // namespace fp8
}  // namespace fp8t
