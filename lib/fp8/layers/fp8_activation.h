// Fp8Activation: the MLP's activation fused into the FP8 casts of the two Linears around it,
// GELU (GPT-2: Fp8Gelu) or SwiGLU (LLaMA: Fp8Swiglu, silu(gate) * up of c_fc's [gate | up]).
//
//   forward:  h = c_fc(x);  act(h) is cast to FP8 with c_proj's input slot in one kernel
//             (rowwise and, when training, columnwise, or with train.recompute activation the
//             columnwise copy for c_proj's wgrad cast from h in the backward: defers_columnwise;
//             SwiGLU under a per-tensor recipe: written by c_fc's gradient cast in the backward,
//             value_copy_from_gradient_cast), and handed to c_proj; act(h) is never written in
//             high precision.
//   backward: c_proj's dgrad gives dy; the gradient of h (dy * gelu'(h), or [dgate | dup]) is
//             cast to FP8 with c_fc's grad_output slot in one kernel (both layouts, with c_fc's
//             dbias), and handed to c_fc's backward; the high-precision gradient of h is never
//             written.
//
// The casts go through the recipe (Scaling::quantize of a CastSource: gelu/dgelu, swiglu/
// dswiglu), so each recipe does its own thing with the fused value (delayed: one fused cast;
// current: an amax pass of the fused kernel, then the fused cast; block: the value in high
// precision, then block casts); this class names no recipe.
//
// Hand-over: autograd still needs a tensor on each edge. Fp8Activation returns (and its
// backward returns) a *carrier*: a tensor of the right shape and dtype with one NaN element
// broadcast over it (no memory), which the receiving Fp8Linear recognises by identity and
// replaces by the FP8 copy. The model declares that c_proj is the activation's only consumer and
// c_fc its only producer (Slot::feeds / fed_by), and the carrier is used only when the receiving
// layer reads nothing but FP8 (Fp8Linear::takes_fp8_input_only / takes_fp8_grad_only); anything
// else that read a carrier would turn the loss into NaN, never into a silently wrong number.
// Either side may be absent (a Linear kept in high precision): then that direction computes the
// activation / its gradient in high precision as the plain model does (materialize()).
#pragma once

#include <memory>   // std::shared_ptr
#include <utility>  // std::move

#include "lib/fp8/layers/fp8_linear.h"  // Fp8Linear
#include "lib/model/layers.h"           // model::UnaryModule, model::Activation::Kind

namespace fp8t {
namespace fp8 {

class Fp8Activation : public model::UnaryModule {
 public:
  // producer: the Fp8Linear whose output is this activation's input (or null); consumer: the
  // only Fp8Linear reading its output (or null). At least one must be given.
  Fp8Activation(model::Activation::Kind kind, std::shared_ptr<Fp8Linear> producer,
                std::shared_ptr<Fp8Linear> consumer);
  at::Tensor forward(const at::Tensor& h) override;

  model::Activation::Kind kind() const { return kind_; }
  Fp8Linear* producer() const { return producer_.get(); }
  Fp8Linear* consumer() const { return consumer_.get(); }

  // Whether the consumer's columnwise FP8 input (its wgrad operand) is cast in the backward from
  // the saved h instead of in the forward and kept (Fp8Linear::set_pending_input): the same
  // codes either way. On (train.recompute activation; the rewrite sets it) holds one FP8 copy of
  // act(h) less per layer between forward and backward (1.3B at B8 T2048: 128 MiB per layer,
  // 3 GiB in all) for a second GELU/SwiGLU cast pass over h in the backward (about 5 ms of a
  // 206 ms step there), with the forward's scale (current scaling: no second amax pass).
  bool defers_columnwise() const { return defer_columnwise_; }
  void set_defers_columnwise(bool on) { defer_columnwise_ = on; }

  // SwiGLU under a per-tensor recipe (the rewrite sets it): the consumer's wgrad copy of act(h) is
  // neither kept from the forward nor cast in a pass of its own. The consumer's backward, right
  // after its dgrad, runs the producer's gradient cast itself, and that one kernel, which reads
  // gate and up anyway, also writes the value's columnwise codes with the forward's scale
  // (CastOptions::value_columnwise): the same codes, one FP8 copy of act(h) less per layer between
  // the passes (LLaMA-1B at B8 T2048: 128 MiB per layer) for about as many bytes written in the
  // backward as the forward no longer writes. This node's backward then hands the gradient the
  // consumer cast to the producer. Applies while both neighbours run dgrad and wgrad in FP8;
  // otherwise the copy is kept or deferred as above.
  bool value_copy_from_gradient_cast() const { return value_from_gradient_; }
  void set_value_copy_from_gradient_cast(bool on) { value_from_gradient_ = on; }

 private:
  bool defer_columnwise_ = false;
  bool value_from_gradient_ = false;
  model::Activation::Kind kind_;
  std::shared_ptr<Fp8Linear> producer_;
  std::shared_ptr<Fp8Linear> consumer_;
};

// The GELU (tanh approximation) of a GPT-2 MLP.
class Fp8Gelu final : public Fp8Activation {
 public:
  Fp8Gelu(std::shared_ptr<Fp8Linear> producer, std::shared_ptr<Fp8Linear> consumer)
      : Fp8Activation(model::Activation::Kind::kGeluTanh, std::move(producer), std::move(consumer)) {}
};

// The SwiGLU of a LLaMA MLP: h [..., 2F] = [gate | up] -> silu(gate) * up [..., F].
class Fp8Swiglu final : public Fp8Activation {
 public:
  Fp8Swiglu(std::shared_ptr<Fp8Linear> producer, std::shared_ptr<Fp8Linear> consumer)
      : Fp8Activation(model::Activation::Kind::kSwiGLU, std::move(producer), std::move(consumer)) {}
};

// A tensor of `sizes` and `options` whose every element is one shared NaN (all strides 0):
// the stand-in for a value handed over in FP8.
at::Tensor nan_carrier(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace fp8
}  // namespace fp8t
