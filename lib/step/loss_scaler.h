// Dynamic loss scaling for FP16 training, with the rules of torch.amp.GradScaler.
//
// FP16 has 5 exponent bits: gradients below 2^-24 flush to zero. The loss is multiplied by a
// scale S before the backward so that the small gradients of the FP16 activations stay
// representable; the weight gradients (FP32, the parameters are FP32) are divided by S again
// before the update. Per optimizer step, with found_inf = the gradients hold an inf or NaN:
//   found_inf:      S *= backoff_factor, growth tracker = 0, the step is skipped
//   otherwise:      tracker += 1; when tracker == growth_interval: S *= growth_factor, tracker = 0
// (ATen's _amp_update_scale_, the op GradScaler.update calls; defaults 2^16, 2, 0.5, 2000).
//
// Nothing here reads the device on the host. The scale and the tracker are device tensors;
// the inf/NaN check runs on the device (ATen's _amp_foreach_non_finite_check_and_unscale_, the
// op GradScaler.unscale_ calls), and the unscale can be folded into the optimizer: AdamW divides
// the gradients by grad_divisor() as it reads them (no pass over the gradients of its own).
// With the default factors S stays a power of two, so dividing by S is exact and the folded
// unscale gives the same bits as unscaling the gradients first.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor
#include <c10/core/Device.h>   // c10::Device

#include <cstdint>  // int64_t
#include <map>      // std::map
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/config/experiment.h"  // TrainSection

namespace fp8t::step {

struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;

  // train.loss_scale_init, _growth_factor, _backoff, _growth_interval.
  static LossScalerOptions from(const TrainSection& t) {
    return LossScalerOptions{t.loss_scale_init, t.loss_scale_growth_factor, t.loss_scale_backoff,
                             t.loss_scale_growth_interval};
  }
};

class LossScaler {
 public:
  // The scale starts at options.init_scale, the growth tracker at 0, on `device`.
  LossScaler(const LossScalerOptions& options, const c10::Device& device);

  // loss * S in float32, the tensor to call backward() on.
  at::Tensor scale_loss(const at::Tensor& loss) const;

  // GradScaler.unscale_: multiplies every gradient by 1/S in place and sets found_inf() when
  // one holds an inf or NaN (one ATen multi-tensor op per device).
  void unscale_(const std::vector<at::Tensor>& grads);

  // The folded form: from the global L2 norm of the still-scaled gradients, returns the norm of
  // the unscaled ones (norm / S) and sets found_inf() when it is inf or NaN. An inf or NaN in
  // any gradient makes the norm inf or NaN, so this flags the same steps as unscale_ (and, in
  // addition, gradients whose squared sum overflows float32, which no real step reaches).
  at::Tensor unscale_norm(const at::Tensor& scaled_norm);

  // The divisor the optimizer applies to the scaled gradients (AdamW::step's grad_scale): S,
  // or S * clip_divisor when clipping (a divisor computed from the unscaled norm).
  at::Tensor grad_divisor(const at::Tensor& clip_divisor = at::Tensor()) const;

  // The flag set by unscale_ / unscale_norm for this step: 0-d float32, 1.0 = inf/NaN found.
  const at::Tensor& found_inf() const { return found_inf_; }

  // End of the step: backoff or growth by the rules above, from `found_inf` (by default the
  // scaler's own flag), then clears the flag for the next step.
  void update(const at::Tensor& found_inf = at::Tensor());

  const at::Tensor& scale() const { return scale_; }                    // 0-d float32
  const at::Tensor& growth_tracker() const { return growth_tracker_; }  // 0-d int32
  const LossScalerOptions& options() const { return options_; }
  double read_scale() const;  // one device-to-host copy, for logs

  // "loss_scale.scale" and "loss_scale.growth_tracker" (the live tensors).
  std::map<std::string, at::Tensor> state_dict() const;
  // Copies both back; throws fp8t::Error (kBadInput) naming a missing or malformed key.
  void load_state_dict(const std::map<std::string, at::Tensor>& state);

 private:
  LossScalerOptions options_;
  at::Tensor scale_;
  at::Tensor growth_tracker_;
  at::Tensor found_inf_;
};

}  // namespace fp8t::step
