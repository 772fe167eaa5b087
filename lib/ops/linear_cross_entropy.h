// The LM head and the loss as one op: the mean softmax cross-entropy of x · Wᵀ against targets,
// computed in chunks of rows so that the [rows, vocab] logits never exist whole.
//
// Why: at the 1.3B's B8 T2048 the logits are 16384 x 50304 BF16 = 1.53 GiB, alive from the head's
// forward to the start of the backward, where the training step's memory peaks. Here each chunk's
// logits are made, turned into their loss and gradient, and consumed at once, in the forward:
//   logits_c = x_c · Wᵀ                      (the head's GEMM, in the compute dtype)
//   loss_rows_c, g_c = (softmax - onehot) / rows   (in place over logits_c)
//   dx_c = g_c · W,   dW += g_cᵀ · x_c       (dW accumulated in FP32)
// and the backward only multiplies dx and dW by the incoming gradient (e.g. 1 / grad_accum).
// Kept from the forward to the backward: dx [rows, d] in the compute dtype and dW [vocab, d] in
// FP32 (at the 1.3B: 64 MiB + 393 MiB instead of the 1.53 GiB logits; the head's input and its
// BF16 weight copy are not kept either).
//
// Numerics: the same GEMMs and cross-entropy formulas as the unfused head + ops::cross_entropy;
// the results differ by rounding only: each chunk's GEMM may run another kernel than the whole
// one, dW is a sum of per-chunk FP32 products (the unfused head's BF16 wgrad GEMM rounds once, to
// BF16), and the gradient is scaled by 1/rows before the GEMMs and by the incoming gradient after
// them (the unfused path scales once, before).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr

#include "lib/ops/tied_embedding.h"  // TiedGradient

namespace fp8t {
namespace ops {

// The chunk rule: as many rows as fit chunk_bytes of logits (train.loss_chunk_mib; default
// kLinearCrossEntropyChunkBytes), rounded down to a multiple of 128 (whole GEMM tiles) when that
// many fit, at least 1, at most `rows`. At the 1.3B (vocab 50304, BF16) and 512 MiB: 5248 rows,
// 503.5 MiB per chunk, 4 chunks of a 16384-row batch; at LLaMA-1B's vocab 128256: 2048 rows, 8
// chunks. Depends on the shapes only, so a captured CUDA graph replays the same chunks. Why 512:
// the LLaMA-1B step measured fastest per MiB there (docs/benchmarks.md, 2026-12-03 (second)).
constexpr int64_t kLinearCrossEntropyChunkBytes = int64_t{512} << 20;
int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t vocab, int64_t element_bytes,
                                        int64_t chunk_bytes = kLinearCrossEntropyChunkBytes);

// x [..., d] floating (the final norm's output), weight [vocab, d] floating (the head's weight,
// e.g. the FP32 parameter, possibly tied to the token embedding), targets integer class indices
// with x's leading shape (or flattened to [rows]). Returns the 0-d float32 mean over the rows of
// -log softmax(x · weightᵀ)[target], differentiable w.r.t. x and weight (gradients in their own
// dtypes; a tied weight's gradients from its other uses add up through autograd as usual).
//
// The GEMMs run in the compute dtype: the autocast dtype when autocast is on for x's device, else
// x's dtype; it must be float32 or bfloat16 (fp16 logits need loss scaling, which this op's
// forward-time gradient does not see: use the unfused head there). chunk_rows > 0 overrides the
// chunk rule (tests); else chunk_bytes (> 0) is the rule's budget of logits per chunk. Without grad mode, or when neither x nor weight requires grad, only the loss
// is computed (chunked, no gradient work).
//
// CPU: ATen ops (softmax in FP32, the onehot subtracted); a target outside [0, vocab) throws.
// CUDA: kernels/cross_entropy.cu's kernels on each chunk, in place; a target outside [0, vocab)
// gives a NaN loss and NaN gradients for its row. Nothing is read back to the host and the chunks
// depend on the shapes only (CUDA-graph capturable).
//
// tied (optional): the weight is the token embedding's, looked up by ops::tied_embedding with
// this TiedGradient; the backward then leaves the weight's gradient there for the embedding's
// backward to add its rows to, and returns none for the weight itself.
at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows = 0, int64_t chunk_bytes = kLinearCrossEntropyChunkBytes,
                                const std::shared_ptr<TiedGradient>& tied = nullptr);

#if defined(FP8T_WITH_CUDA)
namespace detail {
// The CUDA parts (lib/ops/linear_cross_entropy_cuda.cpp); shapes are checked by the caller.
// One chunk's cross-entropy: loss_rows[r] = lse[r] - logits[r, targets[r]] (lse: scratch, [rows]
// float32), then, when grad_scale (1 float on the device) is defined, logits overwritten with
// (softmax - onehot) * grad_scale. logits: contiguous [rows, vocab] float32 or bfloat16.
void cross_entropy_chunk_cuda(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& loss_rows,
                              const at::Tensor& lse, const at::Tensor& grad_scale);
// out (contiguous bfloat16) = a · bᵀ through lib/gemm's BF16 GEMM (the chunk's logits x_c · Wᵀ
// and input gradient g_c · W).
void head_gemm_cuda(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const char* label);
// dw (float32 [vocab, d]) += gᵀ · x for g [rows, vocab] and x [rows, d] of one dtype; while dw is
// undefined (the first chunk) dw = gᵀ · x.
void accumulate_weight_grad_cuda(at::Tensor& dw, const at::Tensor& g, const at::Tensor& x);
// t (contiguous float32 or bfloat16) *= g (one float32 on t's device), skipped on the device when
// g is 1 (the backward's usual incoming gradient).
void scale_unless_one_cuda(at::Tensor& t, const at::Tensor& g);
}  // namespace detail
#endif

}  // namespace ops
}  // namespace fp8t
