// AdamW with FP32 master weights and FP32 (or, by choice, bfloat16) moments, stepped by
// fp8train's own multi-tensor kernel (kernels/adamw.cu; on the CPU the same arithmetic in a loop,
// lib/numerics/adamw_math.h, bit-equal to the kernel).
//
// Per parameter p (0-based step count t before the step, lr given to step()):
//   t      += 1
//   p      -= lr * wd * p                  (decoupled weight decay; wd = 0 for dim() < 2)
//   m       = beta1 * m + (1 - beta1) * g
//   v       = beta2 * v + (1 - beta2) * g^2
//   p      -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// as torch.optim.AdamW: two groups (weight decay for matrices and embeddings, none for biases and
// norm gains). All math is FP32; the bias corrections come from running products beta^t kept per
// parameter on its device next to the step count t (no pow, no host sync), so a result can
// differ from LibTorch's fused AdamW (which computes pow) in the last bits.
//
// Master weights: a float32 contiguous parameter is updated in place. Any other parameter
// (e.g. bfloat16) gets a float32 master copy; its gradient is converted to float32 for the
// update and the parameter receives the rounded master after each step.
//
// Moments dtype (train.moments_dtype): fp32 (the default) keeps exp_avg and exp_avg_sq in
// float32. bf16 stores them in bfloat16 (4 bytes per parameter less): the update runs in FP32 from
// the widened moments, then both are rounded to nearest even.
//
// Sharded (ZeRO-1, lib/dist/grad_sync.h): given the element range of each flattened parameter
// that this rank owns, the optimizer keeps moments for that range only and updates just that
// part of the (float32, contiguous) parameter in place, reading the same range of its gradient.
// ZeRO-3 (lib/dist/fully_sharded.h) hands it the range's master as a tensor of its own.
// Weight decay is decided per parameter (dim() >= 2 of the whole parameter), never from the
// shape of a range, so every rank applies the rule a single process would.
#pragma once

#include <cstdint>     // int64_t
#include <map>         // std::map
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include <ATen/core/Tensor.h>  // at::Tensor

#include "lib/config/experiment.h"  // TrainSection

namespace fp8t::optim {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to parameters with dim() >= 2 only
  MomentsDtype moments_dtype = MomentsDtype::kFp32;  // storage of exp_avg and exp_avg_sq

  static AdamWOptions from(const TrainSection& t) {
    return AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay, t.moments_dtype};
  }
};

// An element range [begin, begin + length) of a flattened parameter.
struct ParamRange {
  int64_t begin = 0;
  int64_t length = 0;
};
// ZeRO-1: the range of each parameter (by name) this rank updates; a parameter without an
// entry, or with length 0, is updated by other ranks.
using ShardRanges = std::map<std::string, ParamRange>;

class AdamW {
 public:
  // `params` are the leaf tensors to optimize (e.g. module->named_parameters()); names must be
  // unique and non-empty. A tensor listed twice (tied weights) is optimized once, under its
  // first name. State is allocated here (zeros) on each parameter's device.
  AdamW(NamedParameters params, AdamWOptions options);
  // Sharded (ZeRO-1): state for the ranges in `shard` only (parameters float32 and contiguous).
  // `shard_grads` (optional, by name): a flat float32 tensor that holds the range's gradient
  // (range length elements) whenever step() runs: under ZeRO-1 the full .grad exists only
  // during the backward, and GradientSync points these tensors at each step's gradient shard.
  // A parameter without one is read from .grad.
  // `shard_masters` (optional, by name): a flat float32 tensor of the range's length that is the
  // range's FP32 master and is updated instead of the parameter (ZeRO-3: the rank's master shard;
  // the parameter itself holds no data then, and only its shape is read).
  AdamW(NamedParameters params, AdamWOptions options, const ShardRanges& shard,
        const std::map<std::string, at::Tensor>& shard_grads = {},
        const std::map<std::string, at::Tensor>& shard_masters = {});

  // One update with learning rate `lr`. Parameters whose grad is undefined are skipped (their
  // step count does not advance); one with a shard gradient (above) is always updated. One kernel
  // launch pair per (device, weight-decay group) and 48 parameters of it (kernels/adamw.cu).
  // grad_scale (optional 0-d tensor): every gradient is divided by it as the kernel reads it
  // (gradient clipping folded into the update, see clip_divisor in grad_clip.h).
  // found_inf (optional 0-d float32 on the device, lib/step/step_health.h): when it holds 1.0
  // the step is skipped on the device — weights, moments and step counts stay as they were —
  // without a host sync.
  void step(double lr, const at::Tensor& grad_scale = at::Tensor(), const at::Tensor& found_inf = at::Tensor());
  // The same update with the learning rate read on the device: `lr` is a 0-d float32 tensor on
  // the parameters' device, so a captured CUDA graph (lib/step/step_graph.h) replays it with
  // each step's value. The kernel rounds a host lr to float32 too, so a tensor holding
  // float(lr) gives the same bits as step(lr).
  void step(const at::Tensor& lr, const at::Tensor& grad_scale = at::Tensor(), const at::Tensor& found_inf = at::Tensor());

  // set_to_none: grads become undefined (the default, as torch.optim); else zeroed in place.
  void zero_grad(bool set_to_none = true);

  // Optimizer state as named tensors (the live tensors, not copies), keys per parameter name:
  //   "<name>.exp_avg", "<name>.exp_avg_sq" (moments_dtype: float32 or bfloat16, the
  //   parameter's shape), "<name>.step" (0-d float32), and "<name>.master" (float32) for
  //   parameters with a separate master copy. The keys are the same for both moments dtypes
  //   (the running products beta^t are rebuilt from the step count on loading). Callers that
  //   store them next to model weights should prefix them (e.g. "optim.").
  // Sharded: the tensors cover the parameter's range only (1-D, ranges() gives it).
  std::map<std::string, at::Tensor> state_dict() const;
  // The element range of each optimized parameter that the state covers: [0, numel) unless
  // sharded.
  std::map<std::string, ParamRange> ranges() const;
  bool sharded() const { return sharded_; }

  // Copies `state` into the optimizer state (and master copies). The key set must match
  // state_dict() exactly; shapes must match. Throws fp8t::Error (kBadInput) naming the first
  // missing, unexpected or mismatched key. Floating-point tensors of another dtype are converted
  // (moments of the other moments_dtype: bf16 -> fp32 exactly, fp32 -> bf16 rounded to nearest
  // even); the running products beta^t are rebuilt from "<name>.step" (one host read per
  // parameter), which must hold a whole number of steps.
  void load_state_dict(const std::map<std::string, at::Tensor>& state);

  // The rules the constructor applies to each parameter, also for describing a run before the
  // optimizer exists (lib/train/precision_chart.h): a float32 contiguous parameter is its own
  // master weight, any other gets a float32 master copy (kStateDtype); the moments are
  // moments_scalar_type(train.moments_dtype).
  static bool needs_master_copy(const at::Tensor& param);
  static constexpr at::ScalarType kStateDtype = at::kFloat;
  static at::ScalarType moments_scalar_type(MomentsDtype d) {
    return d == MomentsDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  }

  const AdamWOptions& options() const { return options_; }
  // Names of the parameters in the weight-decay group (dim() >= 2) and in the no-decay group.
  std::vector<std::string> decay_names() const;
  std::vector<std::string> no_decay_names() const;

 private:
  struct Slot {
    std::string name;
    at::Tensor param;    // the model's parameter
    at::Tensor master;   // float32 contiguous; the same tensor as `param` when possible
    at::Tensor exp_avg;  // moments_dtype, master's shape
    at::Tensor exp_avg_sq;
    at::Tensor step;     // 0-d float32 on the parameter's device: a view of bias_state's element 0
    at::Tensor bias_state;  // float32 [3] = {t, beta1^t, beta2^t} (adamw_math.h)
    bool decay = false;
    bool separate_master = false;
    ParamRange range;      // of the flattened parameter; all of it unless sharded
    at::Tensor shard_grad;  // sharded: the gradient of `range` kept outside .grad (flat), if given
    at::Tensor grad() const;  // the gradient of `range`, as the parameter's shape unless sharded
  };
  struct Group;  // the parameters of one update (optimizer.cpp)
  void check_options() const;
  // Zeroed moments (and the step state) of `s` for a master of `shape` on `options`' device.
  void init_state(Slot& s, at::IntArrayRef shape, const at::TensorOptions& options) const;
  // One step of `group` through adamw_step.h.
  void update_group(const Group& group, const double* lr, const at::Tensor& lr_tensor, const at::Tensor& grad_scale,
                    const at::Tensor& found_inf) const;
  // The parameters with a gradient, grouped by (device, weight decay) in first-seen order.
  std::vector<Group> groups() const;
  // step()'s work: the learning rate is *lr when given, else the tensor lr_tensor.
  void update(const double* lr, const at::Tensor& lr_tensor, const at::Tensor& grad_scale, const at::Tensor& found_inf);

  AdamWOptions options_;
  bool sharded_ = false;
  std::vector<Slot> slots_;
};

}  // namespace fp8t::optim
