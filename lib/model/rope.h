// Rotary position embedding (RoPE) for q and k, in the half-split ("rotate_half") convention of
// Hugging Face's LLaMA: the head dimension D is two halves [x1 | x2], and pair i = (x1[i], x2[i])
// is rotated by the angle t * theta^(-2i/D) at position t:
//   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin.
// Using HF's convention (not Meta's interleaved pairs) means exported q/k weights need no row
// permutation (lib/model/hf_layout.h).
#pragma once

#include <torch/torch.h>  // torch::nn::Module, at::Tensor

#include <cstdint>  // int64_t

namespace fp8t {
namespace model {

// The cos and sin tables [seq_len, head_dim] (each half repeated, as rotate_half expects),
// computed in float64 and stored in float32 as buffers, so Module::to() moves them with the
// model. One instance is shared by every attention layer.
class Rotary : public torch::nn::Module {
 public:
  Rotary(int64_t seq_len, int64_t head_dim, double theta);
  // x: [B, H, T, D] (T <= seq_len) -> x rotated, computed in FP32 and rounded once to x's dtype.
  at::Tensor apply(const at::Tensor& x) const;
  struct Heads {
    at::Tensor q, k, v;  // [B, H, T, D], [B, KV, T, D], [B, KV, T, D]
  };
  // The attention's q, k (rotated) and v from a fused projection's output qkv [B, T, (H + 2 KV) * D]
  // (columns [q | k | v]). On the GPU one kernel each way (ops::rope_qkv: the bits of apply(),
  // and q, k and v in their own tensors, so qkv is not kept); elsewhere, and for shapes that
  // kernel does not take, split + apply().
  Heads apply_qkv(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head) const;
  at::Tensor cos;
  at::Tensor sin;
};

}  // namespace model
}  // namespace fp8t
