// A replaceable attention kernel. The GPT family's CausalSelfAttention runs
// at::scaled_dot_product_attention unless a kernel is installed (the FP8 rewrite installs
// lib/fp8/layers/fp8_attention.h's under fp8.attention); the model knows nothing of FP8.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <memory>  // std::shared_ptr

namespace fp8t {
namespace model {

class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  // Causal attention of q [B, H, T, D] over k, v [B, KV, T, D] (KV divides H: grouped-query
  // heads), scale 1/sqrt(D), no dropout: [B, H, T, D].
  virtual at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) = 0;
};

// A module whose attention kernel can be replaced.
class AttentionHost {
 public:
  virtual ~AttentionHost() = default;
  virtual void set_attention_kernel(std::shared_ptr<AttentionKernel> kernel) = 0;
  virtual bool has_attention_kernel() const = 0;
};

}  // namespace model
}  // namespace fp8t
