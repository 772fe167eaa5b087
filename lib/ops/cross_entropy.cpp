#include "lib/ops/cross_entropy.h"

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace ops {

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, LogitsAfterBackward overwrite) {
  FP8T_CHECK(logits.defined() && targets.defined(), "cross_entropy: logits and targets must be defined tensors");
  FP8T_CHECK(logits.dim() >= 1 && logits.size(-1) >= 1 && at::isFloatingType(logits.scalar_type()),
             "cross_entropy: logits must be a floating-point tensor [..., vocab] with vocab >= 1, got ",
             logits.scalar_type(), " of shape ", logits.sizes());
  FP8T_CHECK(at::isIntegralType(targets.scalar_type(), /*includeBool=*/false),
             "cross_entropy: targets must hold integer class indices, got ", targets.scalar_type(), " of shape ",
             targets.sizes(), " (logits ", logits.sizes(), ")");
  const int64_t vocab = logits.size(-1);
  const int64_t rows = logits.numel() / vocab;
  const at::IntArrayRef lead = logits.sizes().slice(0, logits.dim() - 1);
  const bool flat = targets.dim() == 1 && targets.size(0) == rows;
  FP8T_CHECK(targets.sizes() == lead || flat, "cross_entropy: logits ", logits.sizes(), " need targets of shape ",
             lead, " (or [", rows, "]), got ", targets.sizes());
  FP8T_CHECK(targets.device() == logits.device(), "cross_entropy: logits are on ", logits.device().str(),
             ", targets on ", targets.device().str());
  const at::Tensor t = targets.reshape({-1}).to(at::kLong);  // a no-op for int64 targets

#if defined(FP8T_WITH_CUDA)
  if (logits.is_cuda()) {
    // The kernels read fp32 or bf16 rows; other float types go through fp32 (autograd converts
    // the gradient back). reshape, to and contiguous are differentiable.
    at::Tensor x = logits.reshape({-1, vocab});
    if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) x = x.to(at::kFloat);
    return detail::cross_entropy_cuda(x.contiguous(), t.contiguous(), overwrite);
  }
#endif
  (void)overwrite;  // the CPU gradient comes from ATen's composition
  return at::cross_entropy_loss(logits.reshape({-1, vocab}).to(at::kFloat), t);
}

}  // namespace ops
}  // namespace fp8t
