#include "lib/fp8/recipes/per_cast_scaling.h"

#include <cmath>     // std::isfinite
#include <limits>    // std::numeric_limits
#include <optional>  // std::optional

namespace fp8t {
namespace fp8 {

void PerCastScaling::allocate(const at::Device& device) {
  const int64_t S = num_slots();
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  amax_ = at::zeros({S}, opts);
  scale_ = at::ones({S}, opts);
  scale_inv_ = at::ones({S}, opts);
  amax_rows_ = amax_.view({1, S});
  interval_min_ = at::full({S}, std::numeric_limits<float>::infinity(), opts);
  interval_max_ = at::zeros({S}, opts);
}

void PerCastScaling::record_range(int slot, const at::Tensor& st) {
  add_stats(slot, st.narrow(0, 0, 2));
  interval_min_[slot] = at::minimum(interval_min_[slot], st[2]);
  interval_max_[slot] = at::maximum(interval_max_[slot], st[3]);
  amax_[slot] = st[4];
  scale_[slot] = st[3];
  scale_inv_[slot] = at::reciprocal(st[3]);
}

std::vector<SlotStats> PerCastScaling::read_stats() {
  const at::Tensor amax = amax_.cpu(), scale = scale_.cpu(), sums = stats_sums().cpu();
  const at::Tensor lo = interval_min_.cpu(), hi = interval_max_.cpu();
  std::vector<SlotStats> out;
  for (int i = 0; i < num_slots(); ++i) {
    const auto [saturated, underflow] = stats_fractions(sums, i);
    const bool measured = std::isfinite(lo[i].item<float>());
    out.push_back(SlotStats{slot_name(i), format_name(slot_format(i)), amax[i].item<float>(), scale[i].item<float>(),
                            saturated, underflow, measured ? std::optional<float>(lo[i].item<float>()) : std::nullopt,
                            measured ? std::optional<float>(hi[i].item<float>()) : std::nullopt});
  }
  reset_stats();
  interval_min_.fill_(std::numeric_limits<float>::infinity());
  interval_max_.zero_();
  return out;
}

}  // namespace fp8
}  // namespace fp8t
