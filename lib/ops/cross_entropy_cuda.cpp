// The CUDA path of ops::cross_entropy: an autograd node over kernels/cross_entropy.cu.
//
// Only work on the current LibTorch CUDA stream is enqueued: the mean of the per-row losses and
// the gradient scale (d loss / rows) are computed on the device, nothing is read by the host.
// Saved for the backward: the logits (as given, bf16 or fp32), the targets and the per-row
// log-sum-exp; the gradient is a new tensor, or (LogitsAfterBackward::kOverwriteLogits) the saved
// logits overwritten in place: the backward kernel reads each element before it writes it, in the
// same thread, so the values are the same either way.
#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAGuard
#include <torch/torch.h>            // torch::autograd::Function

#include "fp8t_kernels.h"           // fp8t_cross_entropy_forward / _backward
#include "lib/ops/cross_entropy.h"
#include "lib/util/cuda_tensors.h"  // stream_of, floats_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"         // FP8T_CHECK

namespace fp8t {
namespace ops {

namespace {

using cuda::dtype_code;
using cuda::floats_on;
using cuda::stream_of;

class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, bool overwrite) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    at::Tensor loss_rows = at::empty({rows}, floats_on(logits));
    at::Tensor lse = at::empty({rows}, floats_on(logits));
    FP8T_KERNEL_CHECK(fp8t_cross_entropy_forward(logits.data_ptr(), dtype_code(logits), targets.data_ptr<int64_t>(),
                                                 rows, vocab, loss_rows.data_ptr<float>(), lse.data_ptr<float>(),
                                                 stream_of(logits)),
                      "cross_entropy forward, logits ", rows, "x", vocab, " ", logits.scalar_type());
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["overwrite"] = overwrite;
    return loss_rows.mean();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& targets = saved[1];
    const at::Tensor& lse = saved[2];
    const c10::cuda::CUDAGuard guard(logits.device());
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    // d(mean)/d(loss_rows[r]) = grad / rows, one float on the device. A true division by a device
    // tensor, as ATen's nll_loss backward divides (dividing by a host scalar multiplies by its
    // rounded reciprocal instead, an ulp away).
    const at::Tensor n = at::full({}, static_cast<double>(rows > 0 ? rows : 1), floats_on(logits));
    const at::Tensor grad_scale = (grads[0].to(floats_on(logits)) / n).reshape({1}).contiguous();
    at::Tensor dlogits =
        ctx->saved_data["overwrite"].toBool() ? logits : at::empty({rows, vocab}, logits.options());
    FP8T_KERNEL_CHECK(fp8t_cross_entropy_backward(logits.data_ptr(), dtype_code(logits), targets.data_ptr<int64_t>(),
                                                  lse.data_ptr<float>(), grad_scale.data_ptr<float>(), rows, vocab,
                                                  dlogits.data_ptr(), stream_of(logits)),
                      "cross_entropy backward, logits ", rows, "x", vocab, " ", logits.scalar_type());
    return {dlogits, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace detail {

at::Tensor cross_entropy_cuda(const at::Tensor& logits, const at::Tensor& targets, LogitsAfterBackward overwrite) {
  FP8T_CHECK(logits.is_cuda() && logits.dim() == 2 && logits.is_contiguous() &&
                 (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16),
             "cross_entropy_cuda: logits must be a contiguous 2-D float32 or bfloat16 CUDA tensor, got ",
             logits.scalar_type(), " ", logits.sizes(), " on ", logits.device().str());
  FP8T_CHECK(targets.scalar_type() == at::kLong && targets.dim() == 1 && targets.size(0) == logits.size(0) &&
                 targets.is_contiguous() && targets.device() == logits.device(),
             "cross_entropy_cuda: targets must be contiguous int64 [", logits.size(0), "] on ",
             logits.device().str(), ", got ", targets.scalar_type(), " ", targets.sizes(), " on ",
             targets.device().str());
  return CrossEntropyFunction::apply(logits, targets, overwrite == LogitsAfterBackward::kOverwriteLogits);
}

}  // namespace detail

}  // namespace ops
}  // namespace fp8t
