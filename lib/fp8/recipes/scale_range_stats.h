// The statistics state of the recipes whose scales come with each cast, many per tensor (block,
// rowwise): per slot, the amax and the largest scale of its last measured cast, and the smallest
// and largest scale of the current log interval. Their state classes hold one and report it in
// amax_history() / scale() / scale_inv() / read_stats(). Nothing of it is needed to resume.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <optional>  // std::optional
#include <utility>   // std::pair

namespace fp8t {
namespace fp8 {

class ScaleRangeStats {
 public:
  // [S] float32 on `device`: zero amaxes, scales 1, an empty interval.
  void allocate(int64_t num_slots, const at::Device& device);
  // One measured cast of `slot`: st = {saturated, underflow, smallest scale, largest scale, amax}
  // (float32 [5] on the device, block_cast_stats / rowwise_cast_stats).
  void record(int slot, const at::Tensor& st);
  // The interval's smallest and largest scale of every slot (nullopt: none measured), read on the
  // host; then a new interval starts.
  std::vector<std::pair<std::optional<float>, std::optional<float>>> take_interval();

  const at::Tensor& amax() const { return amax_; }
  const at::Tensor& amax_rows() const { return amax_rows_; }  // amax viewed as [1, S]
  const at::Tensor& scale() const { return scale_; }          // the largest scale of the last cast
  const at::Tensor& scale_inv() const { return scale_inv_; }

 private:
  at::Tensor amax_, scale_, scale_inv_, amax_rows_;
  at::Tensor interval_min_, interval_max_;
};

}  // namespace fp8
}  // namespace fp8t
