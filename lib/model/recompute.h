// Activation recompute (train.recompute): a part of the model whose activations are not kept for
// the backward. LibTorch's C++ API has no torch.utils.checkpoint; this is its reentrant variant.
//
//   forward:  the part runs once as inference (grad mode off, its modules in eval mode) and only
//             its inputs are saved;
//   backward: the part runs again on detached copies of those inputs, now as the ordinary
//             training forward (grad mode on, train mode, the forward's autocast state), and a
//             nested backward runs through it: parameter gradients accumulate into .grad as
//             usual (and fire their accumulator hooks), the input gradients are returned.
//
// Why the first pass runs in eval mode: it is the only pass whose activations are thrown away, so
// it is an inference pass, and modules then know it. The FP8 modules (lib/fp8) record no amax and
// no statistics in eval mode and cast only what the forward GEMM reads, so the amaxes of the part
// are recorded exactly once, by the recompute, with the same scales: the scales change only after
// a micro-batch's backward, never between its forward and its backward (docs/fp8.md). The FP8
// hand-overs (a norm's FP8 output to its Linear, the fused GELU's carriers) happen inside one pass,
// so a part must contain the producer and the consumer of each (lib/model/gpt.cpp draws the parts).
//
// Determinism: the part must compute the same values twice. Dropout would draw new masks (and eval
// mode switches it off), so train.recompute refuses model.dropout > 0 (lib/config/validate.cpp).
// Autocast's weight-cast cache is off inside both passes: a cast cached by the grad-free first pass
// would be reused by the recompute without its autograd history, and the weight would get no
// gradient.
#pragma once

#include <torch/torch.h>  // torch::nn::Module, at::Tensor

#include <functional>  // std::function
#include <vector>      // std::vector

namespace fp8t {
namespace model {

// A part of the model as a function of its input activations (parameters are read from the
// modules). It must return a new tensor, not a view of an input.
using RecomputeFn = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;

// part(inputs), with the part's activations recomputed in the backward instead of saved, when
// autograd would record it: grad mode on, `owner` in training mode and some input requiring grad.
// Otherwise simply part(inputs). `owner` is the module whose children the part runs: it is put in
// eval mode for the first pass (recursively) and back in training mode after it.
at::Tensor recompute_in_backward(torch::nn::Module& owner, RecomputeFn part, std::vector<at::Tensor> inputs);

}  // namespace model
}  // namespace fp8t
