#include "lib/ops/rope.h"

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace ops {

bool rope_qkv_fused(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                    const at::Tensor& cos, const at::Tensor& sin) {
#if defined(FP8T_WITH_CUDA)
  if (!qkv.defined() || !qkv.is_cuda() || qkv.dim() != 3 || head_dim <= 0 || head_dim % 16 != 0) return false;
  const at::ScalarType t = qkv.scalar_type();
  const int64_t bytes = t == at::kFloat ? 4 : 2;
  const bool rows_aligned = qkv.stride(2) == 1 && (qkv.stride(0) * bytes) % 16 == 0 &&
                            (qkv.stride(1) * bytes) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(qkv.data_ptr()) % 16 == 0;
  const auto table_ok = [&](const at::Tensor& tab) {
    return tab.defined() && tab.device() == qkv.device() && tab.scalar_type() == at::kFloat && tab.dim() == 2 &&
           tab.size(1) == head_dim && tab.size(0) >= qkv.size(1) && tab.stride(1) == 1 && tab.stride(0) % 4 == 0 &&
           reinterpret_cast<uintptr_t>(tab.data_ptr()) % 16 == 0;
  };
  return (t == at::kFloat || t == at::kBFloat16) && n_head > 0 && n_kv_head > 0 &&
         qkv.size(2) == (n_head + 2 * n_kv_head) * head_dim && rows_aligned && table_ok(cos) && table_ok(sin);
#else
  (void)qkv, (void)n_head, (void)n_kv_head, (void)head_dim, (void)cos, (void)sin;
  return false;
#endif
}

QkvHeads rope_qkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t n_head,
                  int64_t n_kv_head) {
  const int64_t heads = n_head + 2 * n_kv_head;
  const int64_t head_dim = heads > 0 && qkv.defined() && qkv.dim() == 3 ? qkv.size(2) / heads : 0;
  FP8T_CHECK(rope_qkv_fused(qkv, n_head, n_kv_head, head_dim, cos, sin),
             "rope_qkv: needs a CUDA float32 or bfloat16 qkv [B, T, (n_head + 2 n_kv_head) * D] with aligned rows, "
             "D a multiple of 16, and float32 [>= T, D] tables on its device; got qkv ",
             qkv.defined() ? qkv.sizes() : at::IntArrayRef{}, " for ", n_head, " + 2 x ", n_kv_head, " heads");
#if defined(FP8T_WITH_CUDA)
  return detail::rope_qkv_cuda(qkv, cos, sin, n_head, n_kv_head);
#else
  return {};
#endif
}

}  // namespace ops
}  // namespace fp8t
