#include "lib/ops/add_norm.h"

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace ops {

namespace {

bool kernel_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; }

}  // namespace

bool add_norm_fused(const at::Tensor& x, const at::Tensor& h, at::ScalarType y_dtype) {
#if defined(FP8T_WITH_CUDA)
  return x.defined() && h.defined() && x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() >= 1 &&
         kernel_dtype(h.scalar_type()) && h.sizes() == x.sizes() && h.device() == x.device() &&
         kernel_dtype(y_dtype);
#else
  (void)x, (void)h, (void)y_dtype, (void)kernel_dtype;
  return false;
#endif
}

AddNormResult add_norm(const at::Tensor& x, const at::Tensor& h, const at::Tensor& weight, const at::Tensor& bias,
                       double eps, bool rms, at::ScalarType y_dtype) {
  FP8T_CHECK(add_norm_fused(x, h, y_dtype), "add_norm: needs a float32 CUDA x and a float32 or bfloat16 h of its "
             "shape and device (y float32 or bfloat16), got x ", x.scalar_type(), " ", x.sizes(), " on ",
             x.device().str(), ", h ", h.scalar_type(), " ", h.sizes(), ", y ", y_dtype);
  FP8T_CHECK(weight.numel() == x.size(-1) && (!bias.defined() || bias.numel() == x.size(-1)),
             "add_norm: weight (", weight.sizes(), ") and bias must have the last dim of x ", x.sizes());
#if defined(FP8T_WITH_CUDA)
  return detail::add_norm_cuda(x, h, weight, bias, eps, rms, y_dtype);
#else
  return {};
#endif
}

}  // namespace ops
}  // namespace fp8t
