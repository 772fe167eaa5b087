// Fp8Attention: causal attention with its operands in FP8 (fp8.attention), the kernel the FP8
// rewrite installs in a model's attention (model::AttentionHost). The math and what is rounded
// where: lib/fp8/backends/attention.h.
//
// Slots, per layer "<name>.sdpa": ":q", ":k", ":v", ":o" (E4M3), ":grad_output" (dO) and the
// tensors the backward kernel quantizes itself, ":ds" (cuDNN's "dP"), ":dq", ":dk", ":dv" (the
// last three used only where cuDNN writes the gradients in FP8: before Blackwell), in the
// gradient format. Scales per recipe:
//   q, k, v, o, dO  each cast with Scaling::quantize_per_tensor: delayed from its amax history,
//                   current from the tensor's own amax; block and rowwise: per-tensor current
//                   scaling (their block and row scales do not fit the fused kernel).
//   P               the fixed scale fp8_max(E4M3): softmax probabilities lie in [0, 1].
//   dS, and O, dQ, dK, dV where cuDNN writes them in FP8 (before Blackwell): their scale must be
//                   known before the kernel computes them: delayed gives the slot's scale from
//                   its amax history and takes the kernel's amax like any cast; the others scale
//                   from the amax the layer's previous kernel measured (a layer's first forward
//                   or backward runs once more, to measure it). Elsewhere O is cast after the
//                   kernel, like q.
// On the CPU the emulation runs; on CUDA cuDNN's fused FP8 attention. Where cuDNN refuses the
// shape (its version, the GPU, the head dim) the layer falls back to attention in the compute
// dtype, with one warning per process.
#pragma once

#include <torch/torch.h>  // torch::CustomClassHolder

#include <memory>  // std::shared_ptr
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/backends/attention.h"  // AttentionGradScales
#include "lib/fp8/recipes/scaling.h"     // Scaling
#include "lib/model/attention_kernel.h"  // model::AttentionKernel

namespace fp8t {
namespace fp8 {

// What the autograd node of a forward reads in its backward (shared with the layer: a backward
// after the layer was replaced still finds it).
struct Fp8AttentionState : torch::CustomClassHolder {
  std::shared_ptr<Scaling> scaling;
  int slot_q = -1, slot_k = -1, slot_v = -1, slot_o = -1, slot_grad = -1;
  int slot_ds = -1, slot_dq = -1, slot_dk = -1, slot_dv = -1;
  // The scales of what the kernels quantize themselves, outside delayed scaling: the amax each
  // slot's last kernel measured (0-d float32; undefined before the first, then updated in place,
  // the same tensor every step, as CUDA graph replay needs).
  at::Tensor measured_amax[5];  // ds, dq, dk, dv, o
};

class Fp8Attention : public model::AttentionKernel {
 public:
  // name: the attention module's full name ("h0.attn"); registers the slots on `scaling`.
  Fp8Attention(const std::string& name, std::shared_ptr<Scaling> scaling);
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override;
  // Whether this layer runs attention in the compute dtype (cuDNN refused its shape), and why.
  bool fell_back() const { return fell_back_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  const Fp8AttentionState& state() const { return *state_; }

 private:
  // "" when FP8 attention can run on q's device for this shape; else why not.
  std::string refusal(const at::Tensor& q, const at::Tensor& k) const;
  c10::intrusive_ptr<Fp8AttentionState> state_;
  std::vector<int64_t> checked_shape_;  // the shape refusal() last accepted
  bool fell_back_ = false;
  std::string fallback_reason_;
};

// What the installed FP8 attentions ran, for reports: "" without any; else "N of M attention
// layers in FP8", and where cuDNN refused a shape, how many
// ran in the compute dtype and the first refusal's reason. Meaningful after a forward.
std::string attention_summary(const std::vector<std::shared_ptr<Fp8Attention>>& layers);

// The attention in the compute dtype (the fallback): causal, scale 1/sqrt(D), grouped heads.
at::Tensor high_precision_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

}  // namespace fp8
}  // namespace fp8t
