#include "lib/fp8/recipes/scale_range_stats.h"

#include <cmath>   // std::isfinite
#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

namespace fp8t {
namespace fp8 {

void ScaleRangeStats::allocate(int64_t num_slots, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  amax_ = at::zeros({num_slots}, opts);
  scale_ = at::ones({num_slots}, opts);
  scale_inv_ = at::ones({num_slots}, opts);
  amax_rows_ = amax_.view({1, num_slots});
  interval_min_ = at::full({num_slots}, std::numeric_limits<float>::infinity(), opts);
  interval_max_ = at::zeros({num_slots}, opts);
}

void ScaleRangeStats::record(int slot, const at::Tensor& st) {
  interval_min_[slot] = at::minimum(interval_min_[slot], st[2]);
  interval_max_[slot] = at::maximum(interval_max_[slot], st[3]);
  amax_[slot] = st[4];
  scale_[slot] = st[3];
  scale_inv_[slot] = at::reciprocal(st[3]);
}

std::vector<std::pair<std::optional<float>, std::optional<float>>> ScaleRangeStats::take_interval() {
  const at::Tensor lo = interval_min_.cpu(), hi = interval_max_.cpu();
  std::vector<std::pair<std::optional<float>, std::optional<float>>> out;
  for (int64_t i = 0; i < lo.numel(); ++i) {
    const bool measured = std::isfinite(lo[i].item<float>());
    out.emplace_back(measured ? std::optional<float>(lo[i].item<float>()) : std::nullopt,
                     measured ? std::optional<float>(hi[i].item<float>()) : std::nullopt);
  }
  interval_min_.fill_(std::numeric_limits<float>::infinity());
  interval_max_.zero_();
  return out;
}

}  // namespace fp8
}  // namespace fp8t
