// The CPU emulation of cuDNN's FP8 attention (attention.h): FP32 math on the decoded operands,
// P and dS rounded by the CPU backend's bit-exact cast with the scales cuDNN is given.
#include <limits>  // std::numeric_limits

#include "lib/fp8/backends/attention.h"
#include "lib/fp8/backends/cpu_backend.h"  // cpu_backend, decode_codes
#include "lib/util/error.h"                // FP8T_CHECK

namespace fp8t {
namespace fp8 {
namespace {

at::Tensor dequantize(const AttentionOperand& op) {
  FP8T_CHECK(op.codes.dim() == 4 && op.codes.scalar_type() == at::kByte, "fp8 attention: expected uint8 codes "
             "[B, heads, T, D], got ", op.codes.sizes(), " ", op.codes.scalar_type());
  return decode_codes(op.codes, op.format).view(op.codes.sizes()) * op.scale_inv.cpu();
}

// x (float32, any shape) rounded to FP8 with `slot`'s scale, as the value it stands for; max|x|
// max-accumulates into slot.amax (the cast does it).
at::Tensor round_fp8(const at::Tensor& x, const SlotRef& slot) {
  const int64_t cols = x.size(-1);
  const Fp8Tensor q = cpu_backend().quantize(x.reshape({-1, cols}).contiguous(), slot, true, false);
  return decode_codes(q.rowwise.codes, slot.format).view(x.sizes()) * q.rowwise.scale_inv;
}

// K/V heads repeated for their query heads: [B, KV, T, D] -> [B, H, T, D].
at::Tensor expand_heads(const at::Tensor& kv, int64_t heads) {
  const int64_t group = heads / kv.size(1);
  return group == 1 ? kv : kv.repeat_interleave(group, 1);
}

// The gradient of the expanded K/V heads summed over each group: [B, H, T, D] -> [B, KV, T, D].
at::Tensor sum_heads(const at::Tensor& g, int64_t kv_heads) {
  const int64_t group = g.size(1) / kv_heads;
  if (group == 1) return g;
  return g.view({g.size(0), kv_heads, group, g.size(2), g.size(3)}).sum(2);
}

// attn_scale * Q K^T with the causal mask (-inf above the diagonal): [B, H, T, T].
at::Tensor causal_scores(const at::Tensor& q, const at::Tensor& k, double attn_scale) {
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * attn_scale;
  const int64_t T = q.size(2);
  const at::Tensor above = at::ones({T, T}, at::kBool).triu(1);
  return s.masked_fill(above, -std::numeric_limits<float>::infinity());
}

SlotRef p_slot() {
  return SlotRef{at::full({}, attention_p_scale(), at::kFloat), at::zeros({}, at::kFloat), Format::kE4M3, -1};
}

// The slot's scale and amax on the CPU; the amax goes back to the caller's tensor afterwards.
SlotRef on_cpu(const SlotRef& s) { return SlotRef{s.scale.cpu(), s.amax.cpu().clone(), s.format, s.index}; }
void give_back_amax(const SlotRef& cpu, const SlotRef& caller) {
  if (caller.amax.defined()) caller.amax.copy_(cpu.amax.to(caller.amax.device()));
}

// dQ, dK or dV as the kernel writes it: FP8-rounded with its slot when fp8_outputs.
at::Tensor gradient_output(const at::Tensor& g, bool fp8, const SlotRef& slot, at::ScalarType dtype) {
  if (!fp8) return g.to(dtype);
  const SlotRef cpu = on_cpu(slot);
  at::Tensor r = round_fp8(g, cpu);
  give_back_amax(cpu, slot);
  return r.to(dtype);
}

}  // namespace

float attention_p_scale() { return format_max(Format::kE4M3); }

AttentionForward emulate_attention_forward(const AttentionOperand& q, const AttentionOperand& k,
                                           const AttentionOperand& v, double attn_scale, at::ScalarType out_dtype,
                                           const SlotRef* o_slot) {
  const at::Tensor qf = dequantize(q);
  const int64_t H = qf.size(1);
  const at::Tensor s = causal_scores(qf, expand_heads(dequantize(k), H), attn_scale);
  // As the kernel does: the unnormalized exp(S - rowmax) rounded to E4M3, the row sum unrounded,
  // O divided by it after the product (the normalized P, rounded, was 0.045 away on an H100).
  const at::Tensor m = std::get<0>(s.max(-1, /*keepdim=*/true));
  const at::Tensor e = at::exp(s - m);
  const at::Tensor l = e.sum(-1, /*keepdim=*/true);
  const at::Tensor stats = m + at::log(l);  // logsumexp(S): what the backward recomputes P from
  const at::Tensor o = at::matmul(round_fp8(e, p_slot()), expand_heads(dequantize(v), H)) / l;
  if (o_slot == nullptr) return AttentionForward{o.to(out_dtype), stats, {}};
  // O as the kernel writes it in FP8: its codes (for the backward) and their value.
  const SlotRef cpu = on_cpu(*o_slot);
  const Fp8Tensor o8 = cpu_backend().quantize(o.reshape({-1, o.size(-1)}).contiguous(), cpu, true, false);
  give_back_amax(cpu, *o_slot);
  const AttentionOperand op{o8.rowwise.codes.view(o.sizes()), o8.rowwise.scale_inv, cpu.format};
  return AttentionForward{dequantize(op).to(out_dtype), stats, op};
}

AttentionGrads emulate_attention_backward(const AttentionBackwardInputs& in, const AttentionGradScales& scales,
                                          double attn_scale, at::ScalarType out_dtype) {
  const at::Tensor q = dequantize(in.q), o = dequantize(in.o), dout = dequantize(in.dout);
  const int64_t H = q.size(1), KV = in.k.codes.size(1);
  const at::Tensor k = expand_heads(dequantize(in.k), H), v = expand_heads(dequantize(in.v), H);
  const at::Tensor p = at::exp(causal_scores(q, k, attn_scale) - in.stats.cpu());
  const at::Tensor p8 = round_fp8(p, p_slot());
  const at::Tensor dv = at::matmul(p8.transpose(-2, -1), dout);
  const at::Tensor dp = at::matmul(dout, v.transpose(-2, -1));
  const at::Tensor delta = (dout * o).sum(-1, /*keepdim=*/true);
  const SlotRef ds_slot = on_cpu(scales.ds);
  // dS with attn_scale inside, as cuDNN rounds it (attention.h).
  const at::Tensor ds8 = round_fp8(p * (dp - delta) * attn_scale, ds_slot);
  give_back_amax(ds_slot, scales.ds);
  const at::Tensor dq = at::matmul(ds8, k);
  const at::Tensor dk = at::matmul(ds8.transpose(-2, -1), q);
  const bool fp8 = scales.fp8_outputs;
  return AttentionGrads{gradient_output(dq, fp8, scales.dq, out_dtype),
                        gradient_output(sum_heads(dk, KV), fp8, scales.dk, out_dtype),
                        gradient_output(sum_heads(dv, KV), fp8, scales.dv, out_dtype)};
}

}  // namespace fp8
}  // namespace fp8t
