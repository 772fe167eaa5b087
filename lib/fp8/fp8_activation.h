// Fp8Gelu: the MLP's GELU fused into the FP8 casts of the two Linears around it.
//
//   forward:  h = c_fc(x);  gelu(h) is cast to FP8 with c_proj's input scale in one kernel
//             (rowwise and, when training, columnwise), and handed to c_proj; gelu(h) is never
//             written in high precision.
//   backward: c_proj's dgrad gives dy; dy * gelu'(h) is cast to FP8 with c_fc's grad_output
//             scale in one kernel (both layouts, with c_fc's dbias), and handed to c_fc's
//             backward; the high-precision gradient of h is never written.
//
// Hand-over: autograd still needs a tensor on each edge. Fp8Gelu returns (and its backward
// returns) a *carrier*: a tensor of the right shape and dtype with one NaN element broadcast
// over it (no memory), which the receiving Fp8Linear recognises by identity and replaces by
// the FP8 copy. The model declares that c_proj is the activation's only consumer and c_fc its
// only producer (Slot::feeds / fed_by), and the carrier is used only when the receiving layer
// reads nothing but FP8 (Fp8Linear::takes_fp8_input_only / takes_fp8_grad_only); anything
// else that read a carrier would turn the loss into NaN, never into a silently wrong number.
// Either side may be absent (a Linear kept in high precision): then that direction computes
// GELU / its gradient in high precision as the plain model does.
#pragma once

#include <memory>  // std::shared_ptr

#include "lib/fp8/fp8_linear.h"  // Fp8Linear
#include "lib/model/layers.h"    // model::UnaryModule

namespace fp8t {
namespace fp8 {

class Fp8Gelu : public model::UnaryModule {
 public:
  // producer: the Fp8Linear whose output is this GELU's input (or null); consumer: the only
  // Fp8Linear reading its output (or null). At least one must be given.
  Fp8Gelu(std::shared_ptr<Fp8Linear> producer, std::shared_ptr<Fp8Linear> consumer);
  at::Tensor forward(const at::Tensor& h) override;

  Fp8Linear* producer() const { return producer_.get(); }
  Fp8Linear* consumer() const { return consumer_.get(); }

 private:
  std::shared_ptr<Fp8Linear> producer_;
  std::shared_ptr<Fp8Linear> consumer_;
};

// A tensor of `sizes` and `options` whose every element is one shared NaN (all strides 0):
// the stand-in for a value handed over in FP8.
at::Tensor nan_carrier(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace fp8
}  // namespace fp8t
