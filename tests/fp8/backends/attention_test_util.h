// Operands and float64 references of the FP8 attention tests (lib/fp8/backends/attention.h).
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <limits>  // std::numeric_limits

#include "lib/fp8/backends/attention.h"    // AttentionOperand
#include "lib/fp8/backends/cpu_backend.h"  // cpu_backend, decode_codes

namespace fp8t::test {

// x (float, [B, heads, T, D]) cast to FP8 with a per-tensor scale fp8_max / max|x| / 2.
inline fp8::AttentionOperand attention_operand(const at::Tensor& x, fp8::Format f = fp8::Format::kE4M3) {
  const float scale = fp8::format_max(f) / x.abs().max().item<float>() / 2.0f;
  const fp8::SlotRef ref{at::full({}, scale, at::kFloat), at::zeros({}, at::kFloat), f, 0};
  const fp8::Fp8Tensor t = fp8::cpu_backend().quantize(x.reshape({-1, x.size(-1)}).contiguous(), ref, true, false);
  return fp8::AttentionOperand{t.rowwise.codes.view(x.sizes()), t.rowwise.scale_inv, f};
}

// The value an operand stands for, float64.
inline at::Tensor decoded64(const fp8::AttentionOperand& op) {
  return fp8::decode_codes(op.codes, op.format).view(op.codes.sizes()).to(at::kDouble) *
         op.scale_inv.cpu().to(at::kDouble);
}

// x (float64) rounded to FP8 with `scale` by the bit-exact CPU cast (through float32), float64.
inline at::Tensor round64(const at::Tensor& x, float scale, fp8::Format f) {
  const fp8::SlotRef ref{at::full({}, scale, at::kFloat), at::zeros({}, at::kFloat), f, 0};
  const at::Tensor x32 = x.to(at::kFloat).reshape({-1, x.size(-1)}).contiguous();
  const fp8::Fp8Tensor t = fp8::cpu_backend().quantize(x32, ref, true, false);
  return fp8::decode_codes(t.rowwise.codes, f).view(x.sizes()).to(at::kDouble) / static_cast<double>(scale);
}

inline at::Tensor repeat_heads(const at::Tensor& kv, int64_t heads) {
  return kv.size(1) == heads ? kv : kv.repeat_interleave(heads / kv.size(1), 1);
}

// attn_scale * q k^T with -inf above the diagonal (float64).
inline at::Tensor causal_scores64(const at::Tensor& q, const at::Tensor& k, double attn_scale) {
  const int64_t T = q.size(2);
  return (at::matmul(q, k.transpose(-2, -1)) * attn_scale)
      .masked_fill(at::ones({T, T}, at::kBool).triu(1), -std::numeric_limits<double>::infinity());
}

}  // namespace fp8t::test
