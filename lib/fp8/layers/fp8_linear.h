// Fp8Linear: y = x W^T + b with its three GEMMs in FP8 under the model's scaling recipe
// (lib/fp8/recipes/scaling.h; the layer never names a concrete recipe).
//
//   fprop  y  = x  . W^T    x (E4M3, slot "input")  x W (E4M3, slot "weight")
//   dgrad  dx = dy . W      dy (E5M2 under HYBRID, slot "grad_output") x W^T (column-wise copy)
//   wgrad  dW = dy^T . x    dy^T (column-wise copy of dy) x x^T (column-wise copy of x)
// Every operand is passed K-contiguous (the "TN" layout Hopper requires), so the backward uses
// the column-wise FP8 copies made by the same cast pass; the FP8 copy of x (1 byte per element)
// is what the forward saves for wgrad, not x itself. A GEMM named in
// recipe.override_linear_precision runs in high precision (the activation dtype: FP32 on CPU,
// BF16 under CUDA autocast) on the unquantized operands instead.
//
// The weight is cast once per optimizer step: the FP8 copy (with the scale_inv it was cast with)
// is reused by every micro-batch until the weight or the scales change.
#pragma once

#include <memory>    // std::shared_ptr
#include <optional>  // std::optional
#include <string>    // std::string

#include "lib/fp8/backends/backend.h"         // Fp8Tensor
#include "lib/fp8/recipes/delayed_scaling.h"  // DelayedScaling, for callers that build layers on the default
                                      // recipe's state by hand (the layer itself holds a Scaling)
#include "lib/fp8/recipes/scaling.h"  // Scaling
#include "lib/model/layers.h"         // model::Linear, model::UnaryModule

namespace fp8t {
namespace fp8 {

// A weight gathered in FP8 from the ranks that hold its parts (fully sharded data parallelism,
// lib/dist/fully_sharded.h): the holder fills `rowwise` before the layer's forward and again
// before its backward, and resets it in between and after. While a layer has one, it never casts
// `weight` (which then holds no data): its forward reads these codes and its dgrad transposes them
// just in time (transposed() in backend.h), as set_transposes_weight does.
struct GatheredWeight {
  Fp8Operand rowwise;
};

// The part of an Fp8Linear that its backward reads: the scaling state, the grad_output slot, and
// the output gradient handed over (already cast) by the following fused activation. Every
// autograd node of the layer's forward passes (and of that activation) holds a reference, so a
// backward that runs after the layer was destroyed or replaced still finds it; the reference is
// one pointer copy per forward.
struct Fp8LinearGradState : torch::CustomClassHolder {
  std::shared_ptr<Scaling> scaling;
  int slot_input = -1;  // for an input whose columnwise copy the backward casts (set_pending_input)
  int slot_grad = -1;
  bool has_bias = false;
  std::shared_ptr<GatheredWeight> gathered;  // set_gathered_weight: dgrad's weight at backward time
  // Set by the following activation's backward: the output gradient cast for slot_grad (and
  // its dbias when has_bias), for the backward call that receives `carrier`.
  struct PendingGrad {
    at::Tensor carrier;
    Fp8Tensor dy_fp8;
    at::Tensor dbias;
  } pending;
  // Set by the backward of the Linear after a fused SwiGLU (Fp8Activation::
  // value_copy_from_gradient_cast): this layer's output gradient cast from that Linear's dgrad
  // output, which `carrier` holds here. The activation's backward moves it to `pending` (with its
  // own carrier) when the gradient it receives is that tensor.
  PendingGrad cast_by_consumer;

  // Whether the backward reads only the FP8 copies of the output gradient (dgrad and wgrad in FP8).
  bool takes_fp8_grad_only() const;
};

class Fp8Linear : public model::UnaryModule {
 public:
  // Shares src's weight and bias (same tensors, same parameter names). Registers the slots
  // "<name>:input", "<name>:weight", "<name>:grad_output" in `scaling`.
  Fp8Linear(const model::Linear& src, const std::string& name, std::shared_ptr<Scaling> scaling);

  at::Tensor forward(const at::Tensor& x) override;

  // Handed over by a preceding Fp8Norm or fused activation: its output y (or the carrier that
  // stands for it), already cast for slot_input().
  //
  // columnwise_later: the value of y (e.g. gelu(h) of a saved h), when y_fp8 carries only the
  // rowwise copy. The backward then casts the columnwise copy that wgrad reads from it, with the
  // scale of the forward and recording nothing (NoRecordScope), instead of keeping it from the
  // forward to the backward: the same codes, and no FP8 copy of y held between the passes.
  //
  // gradient_producer (with a columnwise_later of kSwiglu, whose input h is [gate | up]): the
  // Linear before the activation (Fp8Activation::value_copy_from_gradient_cast). The backward then
  // casts that Linear's output gradient, the SwiGLU gradient of its own dgrad output at h, and
  // takes its wgrad copy of y from the same kernel (Fp8LinearGradState::cast_by_consumer).
  void set_pending_input(const at::Tensor& y, Fp8Tensor y_fp8, std::optional<CastSource> columnwise_later = {},
                         c10::intrusive_ptr<Fp8LinearGradState> gradient_producer = {});
  // Whether the backward needs the column-wise FP8 copy of the input (wgrad in FP8).
  bool needs_input_columnwise(bool training) const;
  // Whether no GEMM of this layer reads the high-precision input (fprop, and wgrad when
  // training, run in FP8). Only then may a producer hand over the FP8 input with a carrier
  // tensor whose values are never read (see fp8_activation.h).
  bool takes_fp8_input_only(bool training) const;
  // Whether the backward reads only the FP8 copies of the output gradient (dgrad and wgrad in
  // FP8). Only then may the following fused activation hand over the gradient already cast.
  bool takes_fp8_grad_only() const { return grad_->takes_fp8_grad_only(); }
  // What the backward needs (see Fp8LinearGradState); the following activation's backward hands
  // the output gradient over through it.
  const c10::intrusive_ptr<Fp8LinearGradState>& grad_state() const { return grad_; }
  bool has_bias() const { return bias.defined(); }

  // The weight in FP8, cast at most once per (weight version, scaling update).
  const Fp8Tensor& weight_fp8(bool record, bool rowwise, bool columnwise);
  // The cached FP8 weight as it stands (tests: which layouts the cache holds).
  const Fp8Tensor& cached_weight() const { return weight_cache_.fp8; }

  // train.recompute casts (set by the rewrite; each keeps less FP8 between the passes and changes
  // no bit):
  // recasts_input_columnwise: for a layer whose input its producer keeps for its own backward
  // (model::SlotModule::Slot::input_kept_by_producer: attention's output). The forward casts the
  // rowwise copy alone and keeps the input (a view of what the producer keeps); the backward casts
  // wgrad's columnwise copy from it with the forward's scale (Scaling::recast_scale) under
  // NoRecordScope. Applies while the input arrives as a view (no copy between the producer and
  // this layer, e.g. not behind SDPA's math backend, whose output a reshape copies) and fprop runs
  // in FP8; otherwise the forward casts and keeps the columnwise copy as usual.
  void set_recasts_input_columnwise(bool on) { recast_input_columnwise_ = on; }
  bool recasts_input_columnwise() const { return recast_input_columnwise_; }
  // transposes_weight: the weight cache holds the rowwise copy alone; dgrad transposes its codes
  // just in time (transposed() in backend.h: the bits of the cached columnwise copy) and drops the
  // transpose after the GEMM: one layer's transposed weight alive at a time instead of every layer's.
  void set_transposes_weight(bool on) { transpose_weight_ = on; }
  bool transposes_weight() const { return transpose_weight_; }

  // Sharded weights (GatheredWeight above): null (the default) casts `weight` as usual. Only for
  // layers whose fprop and dgrad run in FP8 (recipe.override_linear_precision), which read no
  // high-precision weight.
  void set_gathered_weight(std::shared_ptr<GatheredWeight> gathered);
  const std::shared_ptr<GatheredWeight>& gathered_weight() const { return grad_->gathered; }

  const std::string& layer_name() const { return name_; }
  Scaling& scaling() const { return *scaling_; }
  int slot_input() const { return slot_input_; }
  int slot_weight() const { return slot_weight_; }
  int slot_grad_output() const { return slot_grad_; }

  int64_t in_features;
  int64_t out_features;
  at::Tensor weight;
  at::Tensor bias;

 private:
  std::string name_;
  std::shared_ptr<Scaling> scaling_;
  int slot_input_, slot_weight_, slot_grad_;

  struct Pending {
    at::Tensor y;
    Fp8Tensor y_fp8;
    std::optional<CastSource> columnwise_later;
    c10::intrusive_ptr<Fp8LinearGradState> gradient_producer;
  } pending_;

  c10::intrusive_ptr<Fp8LinearGradState> grad_;
  bool recast_input_columnwise_ = false;
  bool transpose_weight_ = false;

  struct WeightCache {
    Fp8Tensor fp8;
    int64_t weight_version = -1;
    int64_t update_count = -1;
    bool recorded = false;
  } weight_cache_;
};

}  // namespace fp8
}  // namespace fp8t
