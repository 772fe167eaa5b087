// Mean softmax cross-entropy of the GPT loss, dispatched on the logits' device: ATen's
// composition on the CPU (the FP8 emulation tests depend on its exact bits), two fused kernels on
// CUDA (kernels/cross_entropy.cu) that need neither an FP32 copy of the logits nor a saved
// log_softmax.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

namespace fp8t {
namespace ops {

// logits [..., vocab] of any floating dtype; targets int64 (any integer type is converted) class
// indices of shape [...] (logits' shape without the last dim) or flattened to [rows]. Returns the
// 0-d float32 mean over all rows of -log softmax(logits)[target], differentiable w.r.t. logits
// (the gradient has the logits' dtype and shape).
//
// CPU (and builds without CUDA): exactly at::cross_entropy_loss(logits.reshape({-1, vocab})
// .to(kFloat), targets.reshape({-1})). CUDA: the fused kernels, FP32 math, about 1e-6 relative to
// the CPU result; a target outside [0, vocab) gives a NaN loss and NaN gradients for its row
// (ATen's ignore_index -100 is not supported there). Nothing is read back to the host.
//
// overwrite: CUDA only, what the backward may do with the logits it saved. kKeep leaves them as
// they were. kOverwriteLogits writes the gradient into the logits' own memory and hands that on
// as the gradient (same values, bit for bit), so that the logits and their gradient (two
// [rows, vocab] tensors, 1.5 GiB each at the 1.3B's B8 T2048 in bf16) never exist at once: the
// caller promises not to read the logits after the backward (the training step's loss).
enum class LogitsAfterBackward { kKeep, kOverwriteLogits };
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                         LogitsAfterBackward overwrite = LogitsAfterBackward::kKeep);

#if defined(FP8T_WITH_CUDA)
namespace detail {
// The CUDA path of cross_entropy (lib/ops/cross_entropy_cuda.cpp): logits [rows, vocab] contiguous
// float32 or bfloat16, targets [rows] contiguous int64 on the same device. Shapes are checked by
// cross_entropy.
at::Tensor cross_entropy_cuda(const at::Tensor& logits, const at::Tensor& targets, LogitsAfterBackward overwrite);
}  // namespace detail
#endif

}  // namespace ops
}  // namespace fp8t
