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

Fp8Tensor PerCastScaling::quantize_per_tensor(int slot, const CastSource& src, const CastOptions& opt) {
  const Format format = slot_format(slot);
  Backend& backend = backend_for(src.x.device());
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(src.x.device());
  const at::Tensor amax = at::zeros({}, f32), scale = at::ones({}, f32), scale_inv = at::ones({}, f32);
  backend.current_amax_scale(src, opt.known_amax, amax, scale, scale_inv, at::zeros({2}, f32.dtype(at::kInt)),
                             format_max(format), /*two_pow_margin=*/1.0f, /*may_write_value=*/false);
  const SlotRef ref{scale, amax, format, slot};
  Fp8Tensor out = backend.quantize(src, ref, {opt.rowwise, opt.columnwise, nullptr, {}});
  if (recording(opt.record) && collect_stats()) add_stats(slot, backend.saturation_stats(materialize(src), ref));
  return out;
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
