#include "lib/ops/swiglu.h"

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace ops {

bool swiglu_fused(const at::Tensor& h) {
#if defined(FP8T_WITH_CUDA)
  return h.defined() && h.is_cuda() && (h.scalar_type() == at::kFloat || h.scalar_type() == at::kBFloat16) &&
         h.dim() >= 1 && h.size(-1) % 2 == 0;
#else
  (void)h;
  return false;
#endif
}

at::Tensor swiglu(const at::Tensor& h) {
  FP8T_CHECK(swiglu_fused(h), "swiglu: needs a CUDA float32 or bfloat16 h [..., 2F], got ",
             h.defined() ? h.sizes() : at::IntArrayRef{});
#if defined(FP8T_WITH_CUDA)
  return detail::swiglu_cuda(h);
#else
  return {};
#endif
}

}  // namespace ops
}  // namespace fp8t
