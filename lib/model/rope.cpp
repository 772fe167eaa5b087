#include "lib/model/rope.h"

#include <vector>  // std::vector

#include "lib/ops/rope.h"     // ops::rope_qkv
#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace model {

Rotary::Rotary(int64_t seq_len, int64_t head_dim, double theta) {
  FP8T_CHECK(head_dim % 2 == 0, "RoPE needs an even head dimension, got ", head_dim);
  const auto f64 = torch::TensorOptions().dtype(at::kDouble);
  // inv_freq[i] = theta^(-2i/D), i < D/2; angle[t, i] = t * inv_freq[i].
  const at::Tensor inv_freq = at::pow(theta, -torch::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));
  const at::Tensor angle = at::outer(torch::arange(seq_len, f64), inv_freq);
  const at::Tensor full = at::cat({angle, angle}, -1);  // [T, D]: each half sees the same angles
  cos = register_buffer("cos", full.cos().to(at::kFloat));
  sin = register_buffer("sin", full.sin().to(at::kFloat));
}

at::Tensor Rotary::apply(const at::Tensor& x) const {
  const int64_t T = x.size(-2), half = x.size(-1) / 2;
  FP8T_CHECK(T <= cos.size(0), "RoPE: sequence of ", T, " tokens is longer than the table (", cos.size(0), ")");
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
  // rotate_half(x) = [-x2 | x1]
  const at::Tensor rotated = at::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * c + rotated * s).to(x.scalar_type());
}

Rotary::Heads Rotary::apply_qkv(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = cos.size(1);
  FP8T_CHECK(qkv.size(2) == (n_head + 2 * n_kv_head) * D, "RoPE: q/k/v of ", qkv.size(2), " columns is not ", n_head,
             " + 2 x ", n_kv_head, " heads of ", D);
  FP8T_CHECK(T <= cos.size(0), "RoPE: sequence of ", T, " tokens is longer than the table (", cos.size(0), ")");
  if (ops::rope_qkv_fused(qkv, n_head, n_kv_head, D, cos, sin)) {
    const ops::QkvHeads h = ops::rope_qkv(qkv, cos, sin, n_head, n_kv_head);
    return {h.q.transpose(1, 2), h.k.transpose(1, 2), h.v.transpose(1, 2)};
  }
  // [B, T, h*D] -> [B, h, T, D]; split's backward is one cat into the qkv layout.
  const std::vector<at::Tensor> parts = qkv.split_with_sizes({n_head * D, n_kv_head * D, n_kv_head * D}, -1);
  return {apply(parts[0].view({B, T, n_head, D}).transpose(1, 2)), apply(parts[1].view({B, T, n_kv_head, D}).transpose(1, 2)),
          parts[2].view({B, T, n_kv_head, D}).transpose(1, 2)};
}

}  // namespace model
}  // namespace fp8t
