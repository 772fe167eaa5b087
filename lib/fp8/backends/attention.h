// FP8 scaled-dot-product attention (fp8.attention): the operands and scales as cuDNN's fused FP8
// attention takes them (cudnn-frontend's Graph::sdpa_fp8 / sdpa_fp8_backward), its CPU emulation
// (attention_emulation.cpp) and the cuDNN path (attention_cuda.cpp, CUDA builds).
//
// Causal attention of q [B, H, T, D] over k, v [B, KV, T, D] (KV divides H: query head h reads
// K/V head h / (H / KV), grouped-query attention). With Q, K, V the dequantized FP8 operands:
//   forward   S = attn_scale * Q K^T (masked above the diagonal), E = exp(S - rowmax(S)),
//             E8 = E rounded to E4M3 with the fixed scale fp8_max(E4M3) (E lies in [0, 1], so
//             that scale never saturates; cuDNN's "scale_s"), O = E8 V / rowsum(E), in FP32
//             (the kernel rounds the unnormalized E, and divides by the unrounded row sum after
//             the product: measured on an H100, docs/fp8.md); O leaves in the compute dtype;
//             stats = logsumexp of each row of S (FP32), for the backward.
//   backward  with O and dO the FP8 copies of the output and its gradient:
//             P = exp(S - stats) recomputed (normalized), P8 = P rounded like E8,
//             dV = P8^T dO, dP = dO V^T, Delta = rowsum(dO * O),
//             dS = attn_scale * P * (dP - Delta) (the gradient of Q K^T: attn_scale inside, as
//             cuDNN quantizes it; its amax, measured on an H100, is attn_scale times that of
//             P * (dP - Delta)), dS8 = dS rounded to the gradient format with the dS scale
//             (cuDNN's "dP" scale), dQ = dS8 K, dK = dS8^T Q; dK and dV summed over the query
//             heads of each K/V head. P is recomputed from stats.
// cuDNN quantizes P and dS inside its kernels, so their scales must be known before it runs
// (AttentionGradScales); the emulation rounds them the same way, with the same scales.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <optional>  // std::optional
#include <string>    // std::string

#include "lib/fp8/backends/backend.h"  // SlotRef
#include "lib/numerics/format.h"       // Format

namespace fp8t {
namespace fp8 {

// One FP8 tensor of the attention: uint8 codes [B, heads, T, D] (contiguous) and the 0-d
// float32 factor that dequantizes them (1 / the scale of its cast).
struct AttentionOperand {
  at::Tensor codes;
  at::Tensor scale_inv;
  Format format = Format::kE4M3;
};

struct AttentionForward {
  at::Tensor out;       // [B, H, T, D] in the requested dtype
  at::Tensor stats;     // float32 [B, H, T, 1]: logsumexp of each row of S
  AttentionOperand o8;  // O as the kernel wrote it in FP8 (an o_slot was given); else empty
};

// The scales of what the backward kernel produces and quantizes itself: dS always; dQ, dK, dV
// when they leave in FP8 (cuDNN before Blackwell has no 16-bit outputs; `fp8_outputs`).
// Each SlotRef's amax receives max|value| (max-accumulated), for the next scale.
struct AttentionGradScales {
  SlotRef ds;
  bool fp8_outputs = false;
  SlotRef dq, dk, dv;
};

struct AttentionGrads {
  at::Tensor dq;  // [B, H, T, D]
  at::Tensor dk;  // [B, KV, T, D]
  at::Tensor dv;  // [B, KV, T, D]
};

struct AttentionBackwardInputs {
  AttentionOperand q, k, v, o, dout;
  at::Tensor stats;  // AttentionForward::stats
};

// The fixed scale of P: fp8_max(E4M3) = 448 (max P = 1 maps to the largest code).
float attention_p_scale();

// The emulation, on the CPU: FP32 math on the decoded operands, P and dS rounded by the CPU
// backend's bit-exact cast. out_dtype: the dtype of O and of the gradients. o_slot (optional):
// O leaves in FP8 with its scale (E4M3; its amax max-accumulates there), as cuDNN writes it
// before Blackwell; `out` is then that FP8 value.
AttentionForward emulate_attention_forward(const AttentionOperand& q, const AttentionOperand& k,
                                           const AttentionOperand& v, double attn_scale, at::ScalarType out_dtype,
                                           const SlotRef* o_slot = nullptr);
AttentionGrads emulate_attention_backward(const AttentionBackwardInputs& in, const AttentionGradScales& scales,
                                          double attn_scale, at::ScalarType out_dtype);

// ---- cuDNN (attention_cuda.cpp; CUDA builds with cudnn-frontend's headers) ---------------------
// "" when this build has cuDNN's FP8 attention; else why not (what is missing).
std::string cudnn_attention_unavailable();

struct AttentionShape {
  int64_t batch, heads, kv_heads, seq, head_dim;
};
// "" when cuDNN builds both graphs of this shape on the current device (built once and cached;
// the caller asks before it casts); else cuDNN's reason (its version, the GPU, the shape).
// fp8_outputs: O, dQ, dK, dV in FP8 (cudnn_attention_needs_fp8_outputs).
std::string cudnn_attention_refusal(const AttentionShape& shape, double attn_scale, at::ScalarType out_dtype,
                                    Format grad_format, bool fp8_outputs);
// The fused kernels on CUDA tensors. nullopt when cuDNN refuses the graph (its version, the GPU,
// the shape): *refused then says why, and the caller falls back.
std::optional<AttentionForward> cudnn_attention_forward(const AttentionOperand& q, const AttentionOperand& k,
                                                        const AttentionOperand& v, double attn_scale,
                                                        at::ScalarType out_dtype, const SlotRef* o_slot,
                                                        std::string* refused);
std::optional<AttentionGrads> cudnn_attention_backward(const AttentionBackwardInputs& in,
                                                       const AttentionGradScales& scales, double attn_scale,
                                                       at::ScalarType out_dtype, std::string* refused);
// Whether cuDNN writes O, dQ, dK, dV in FP8 only on this device (before Blackwell, or cuDNN
// before 9.13): the caller then passes O's slot and fills AttentionGradScales::dq/dk/dv. False
// without cuDNN.
bool cudnn_attention_needs_fp8_outputs(const at::Device& device);

}  // namespace fp8
}  // namespace fp8t
