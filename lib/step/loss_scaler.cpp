#include "lib/step/loss_scaler.h"

#include <ATen/ATen.h>            // at::_amp_update_scale_, at::_amp_foreach_non_finite_check_and_unscale_
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not in ATen.h without the precompiled header)

#include <algorithm>  // std::find_if
#include <iterator>   // std::prev
#include <utility>    // std::pair

#include "lib/util/error.h"  // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t::step {

namespace {

// 1/S as GradScaler computes it (in float64, then rounded to float32), on the device.
at::Tensor inverse_scale(const at::Tensor& scale) { return scale.to(at::kDouble).reciprocal().to(at::kFloat); }

}  // namespace

LossScaler::LossScaler(const LossScalerOptions& options, const c10::Device& device) : options_(options) {
  FP8T_CHECK(options_.init_scale > 0.0, "LossScaler: init_scale must be > 0, got ", options_.init_scale);
  FP8T_CHECK(options_.growth_factor > 1.0, "LossScaler: growth_factor must be > 1, got ", options_.growth_factor);
  FP8T_CHECK(options_.backoff_factor > 0.0 && options_.backoff_factor < 1.0,
             "LossScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor);
  FP8T_CHECK(options_.growth_interval >= 1, "LossScaler: growth_interval must be >= 1, got ",
             options_.growth_interval);
  const auto opts = at::TensorOptions().device(device);
  scale_ = at::full({}, options_.init_scale, opts.dtype(at::kFloat));
  growth_tracker_ = at::zeros({}, opts.dtype(at::kInt));  // int32, as _amp_update_scale_ requires
  found_inf_ = at::zeros({}, opts.dtype(at::kFloat));
}

at::Tensor LossScaler::scale_loss(const at::Tensor& loss) const { return loss.to(at::kFloat) * scale_; }

void LossScaler::unscale_(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  // One multi-tensor launch per device; each device's flag is folded into the one flag.
  std::vector<std::pair<at::Device, std::vector<at::Tensor>>> by_device;
  for (const at::Tensor& g : grads) {
    if (!g.defined()) continue;
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& e) { return e.first == g.device(); });
    if (it == by_device.end()) {
      by_device.emplace_back(g.device(), std::vector<at::Tensor>{});
      it = std::prev(by_device.end());
    }
    it->second.push_back(g);
  }
  for (auto& [device, list] : by_device) {
    at::Tensor found = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(list, found, inverse_scale(scale_).to(device));
    found_inf_.copy_(at::maximum(found_inf_, found.to(found_inf_.device())));
  }
}

at::Tensor LossScaler::unscale_norm(const at::Tensor& scaled_norm) {
  at::NoGradGuard no_grad;
  // The same ATen op as unscale_, over the one-element norm: it unscales and flags in one launch.
  std::vector<at::Tensor> norm{scaled_norm.to(scale_.device(), at::kFloat).clone()};
  at::_amp_foreach_non_finite_check_and_unscale_(norm, found_inf_, inverse_scale(scale_));
  return norm.front();
}

at::Tensor LossScaler::grad_divisor(const at::Tensor& clip_divisor) const {
  if (!clip_divisor.defined()) return scale_;
  return scale_ * clip_divisor.to(scale_.device(), at::kFloat);
}

void LossScaler::update(const at::Tensor& found_inf) {
  at::NoGradGuard no_grad;
  const at::Tensor& found = found_inf.defined() ? found_inf : found_inf_;
  // _amp_update_scale_ reads found_inf as "> 0 means inf": a flag from elsewhere is made 0/1 float32.
  const at::Tensor flag = found.to(scale_.device(), at::kFloat).gt(0).to(at::kFloat);
  at::_amp_update_scale_(scale_, growth_tracker_, flag, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
  found_inf_.zero_();
}

double LossScaler::read_scale() const { return scale_.item<double>(); }

std::map<std::string, at::Tensor> LossScaler::state_dict() const {
  return {{"loss_scale.scale", scale_}, {"loss_scale.growth_tracker", growth_tracker_}};
}

void LossScaler::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  at::NoGradGuard no_grad;
  for (const auto& [key, target] : state_dict()) {
    const auto it = state.find(key);
    FP8T_INPUT_CHECK(it != state.end(), "the checkpoint has no '", key,
                     "' (it was not written by an fp16 run with dynamic loss scaling)");
    FP8T_INPUT_CHECK(it->second.defined() && it->second.numel() == 1, "checkpoint key '", key,
                     "' must hold one value, got shape ", it->second.sizes());
    target.copy_(it->second.reshape({}));
  }
}

}  // namespace fp8t::step
