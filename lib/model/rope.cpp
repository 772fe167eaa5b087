#include "lib/model/rope.h"

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

}  // namespace model
}  // namespace fp8t
