// The token embedding of a weight the LM head shares, and the hand-over of the head's weight
// gradient to it, so that the shared weight's gradient is made in one tensor.
//
// Why: left to autograd, the tied weight's two gradients are two dense [vocab, d] FP32 tensors,
// the embedding's made from zeros, added out of place (at LLaMA-1B's vocab, three 1 GiB tensors
// read or written besides the scatter). Here the head's backward (ops::linear_cross_entropy)
// leaves its dW in a TiedGradient instead of returning it, and the embedding's backward adds its
// rows into that dW in place and returns it as the weight's one gradient.
//
// The hand-over is matched by forward: each tied_embedding forward numbers itself, the head's
// forward records the number it follows, and the embedding's backward takes only a dW stored
// under its own number (else it starts from zeros and the head's gradient, if any, has reached
// the weight through autograd as usual). The head's backward always runs first: the embedding's
// output gradient comes through it.
//
// Numerics: the rows are added in place by ATen's index_put_ with accumulate (sorted indices,
// each weight row's contributions added one after the other in token order: deterministic on
// CUDA and CPU); the sum rounds differently from the dense embedding gradient plus dW (one
// rounding per token instead of the tokens' sum first), within float32 rounding of it.
#pragma once

#include <ATen/ATen.h>         // at::Tensor
#include <ATen/core/ivalue.h>  // torch::CustomClassHolder

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <utility>  // std::move

namespace fp8t {
namespace ops {

// The head's weight gradient on its way to the embedding's backward.
struct TiedGradient {
  int64_t forwards = 0;  // tied_embedding forwards so far (the number of the latest)
  int64_t stored_for = -1;  // the forward whose head stored dw
  at::Tensor dw;            // the head's weight gradient, scaled by the loss's incoming gradient
};

namespace detail {
// A TiedGradient carried in an autograd context's saved data (by the embedding and the head).
struct TiedHolder : torch::CustomClassHolder {
  explicit TiedHolder(std::shared_ptr<TiedGradient> t) : tied(std::move(t)) {}
  std::shared_ptr<TiedGradient> tied;
};
}  // namespace detail

// weight [vocab, d] floating, ids integer of any shape: weight[ids] ([..., d]), differentiable
// w.r.t. weight. Its backward returns tied->dw plus the rows' gradients when the head that
// followed this forward stored its dw, else a fresh gradient. The ids are checked as
// at::embedding checks them.
at::Tensor tied_embedding(const at::Tensor& weight, const at::Tensor& ids, const std::shared_ptr<TiedGradient>& tied);

}  // namespace ops
}  // namespace fp8t
