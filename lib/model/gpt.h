// A GPT decoder as ordinary LibTorch modules: token (+ learned position) embedding, pre-norm
// blocks with causal attention and an MLP, a final norm and the LM head (optionally tied to the
// token embedding). It knows nothing about FP8.
//
// The same class builds GPT-2 and LLaMA shapes: model.position rope rotates q and k
// (lib/model/rope.h) instead of adding a learned position table; model.n_kv_head < n_head is
// grouped-query attention (each K/V head serves n_head / n_kv_head query heads); q, k, v come from
// one fused GEMM (c_attn, rows [q | k | v]) or three (q_proj, k_proj, v_proj, model.fused_qkv false).
// model.init_from loads the starting weights from a safetensors file (lib/model/hf_layout.h).
//
// train.recompute (set_recompute) chooses the part of every block whose activations the backward
// recomputes instead of keeping (lib/model/recompute.h): attention = ln_1, the attention and its
// residual add; mlp = ln_2, the MLP and its residual add; block = the whole block. A norm hands its
// output to the following Linear (in FP8 runs as an FP8 copy), so it is always in its Linear's part.
//
// Residual adds go through the norm that reads their sum (ResidualNorm::forward_add, fused into
// one kernel on the GPU) wherever no recompute part boundary lies between the add and the norm:
// without recompute every add (the MLP's into the next block's ln_1 or into ln_f), with
// recompute block or mlp the attention's add into ln_2 (mlp's part starts with it); attention
// keeps its part's own add.
#pragma once

#include <torch/torch.h>  // torch::nn

#include <functional>  // std::function
#include <memory>      // std::shared_ptr
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/config/experiment.h"  // ModelSection, Recompute
#include "lib/model/attention_kernel.h"  // AttentionHost, AttentionKernel
#include "lib/model/layers.h"       // Linear, Norm, SlotModule
#include "lib/model/model.h"        // Model
#include "lib/model/rope.h"         // Rotary
#include "lib/model/unit_hooks.h"   // UnitHooks
#include "lib/ops/linear_cross_entropy.h"  // ops::kLinearCrossEntropyChunkBytes, ops::TiedGradient

namespace fp8t {
namespace model {

class CausalSelfAttention : public SlotModule, public AttentionHost {
 public:
  // rotary: the model's shared RoPE tables, or null for learned positions.
  CausalSelfAttention(const ModelSection& cfg, std::shared_ptr<Rotary> rotary);
  at::Tensor forward(const at::Tensor& x);
  // A kernel in place of at::scaled_dot_product_attention (null: that one again).
  void set_attention_kernel(std::shared_ptr<AttentionKernel> kernel) override { kernel_ = std::move(kernel); }
  bool has_attention_kernel() const override { return kernel_ != nullptr; }
  // Fused: c_attn d -> (n_head + 2 n_kv_head) * head_dim, rows [q | k | v]. Separate: q_proj,
  // k_proj, v_proj (the others null).
  std::shared_ptr<UnaryModule> c_attn;
  std::shared_ptr<UnaryModule> q_proj, k_proj, v_proj;
  std::shared_ptr<UnaryModule> c_proj;  // d -> d
  // model.qk_norm: RMSNorm of the q and k projections over their full width (not slots: no Linear
  // reads them alone); null without.
  std::shared_ptr<Norm> q_norm, k_norm;
 private:
  // Causal attention of q [B, H, T, D], k and v [B, KV, T, D], then c_proj: [B, T, C].
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t B, int64_t T, int64_t C);
  int64_t n_head_;
  int64_t n_kv_head_;
  int64_t head_dim_;
  std::shared_ptr<Rotary> rotary_;
  std::shared_ptr<AttentionKernel> kernel_;
  double dropout_;
  torch::nn::Dropout resid_drop_{nullptr};
};

// A block's feed-forward part: the dense Mlp below, or a mixture of experts (lib/model/moe_layer.h).
class FeedForward : public SlotModule {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // GPT-2 initialisation of the weights that write into the residual stream: N(0, std).
  virtual void init_output_weights(double std) = 0;
  // The slot of the only Linear that reads the input (the block's ln_2 feeds it: an FP8 norm casts
  // for it); "" when several layers read it.
  virtual std::string input_linear() const { return ""; }
};

class Mlp : public FeedForward {
 public:
  explicit Mlp(const ModelSection& cfg);  // model.d_ff wide, model.activation
  // ff wide; SwiGLU or GELU; with or without biases.
  Mlp(int64_t d_model, int64_t ff, bool swiglu, bool bias, double dropout);
  at::Tensor forward(const at::Tensor& x) override;
  void init_output_weights(double std) override;
  std::string input_linear() const override { return "c_fc"; }
  std::shared_ptr<UnaryModule> c_fc;    // d -> ff (GELU) or d -> 2ff (SwiGLU: gate and up, fused)
  std::shared_ptr<UnaryModule> act;     // Activation: GELU or SwiGLU
  std::shared_ptr<UnaryModule> c_proj;  // ff -> d
 private:
  torch::nn::Dropout drop_{nullptr};
};

// Builds the feed-forward part of block `layer` (0-based); null: the dense Mlp of the config.
using FeedForwardFactory = std::function<std::shared_ptr<FeedForward>(int64_t layer)>;

// The residual stream between blocks: x + pending, where pending (when defined) is a branch
// output whose add is left to the next norm (fused into it).
struct Residual {
  at::Tensor x;
  at::Tensor pending;
  at::Tensor sum() const { return pending.defined() ? x + pending : x; }
};

class Block : public SlotModule {
 public:
  // ffn: the block's feed-forward part; null: the dense Mlp of the config.
  Block(const ModelSection& cfg, std::shared_ptr<Rotary> rotary, std::shared_ptr<FeedForward> ffn = nullptr);
  at::Tensor forward(const at::Tensor& x);  // the block's output residual, all adds done
  // The block on the stream: without recompute it returns its MLP output as pending.
  Residual forward(const Residual& in);
  void set_recompute(Recompute mode);
  std::shared_ptr<UnaryModule> ln_1;
  std::shared_ptr<UnaryModule> ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<FeedForward> mlp;  // registered as "mlp": the dense Mlp or another feed-forward part
  // mlp as the dense Mlp (fp8t::Error when the block has another feed-forward part).
  std::shared_ptr<Mlp> dense_mlp() const;

 private:
  Residual forward_fused(const Residual& in);          // no recompute: every add into its norm
  at::Tensor forward_parts(const at::Tensor& x);       // the block with the recompute parts
  at::Tensor attention_residual(const at::Tensor& x);  // x + attn(ln_1(x))
  at::Tensor mlp_residual(const at::Tensor& h);        // h + mlp(ln_2(h))
  Recompute recompute_ = Recompute::kNone;
};

// The Gpt family of model::Model (lib/model/model.h).
class Gpt : public Model {
 public:
  explicit Gpt(const ModelSection& cfg);
  // ---- model::Model ----
  // idx: int64 [B, T] -> logits [B, T, vocab]
  at::Tensor forward(const at::Tensor& idx) override;
  // idx: int64 [B, T] -> the final norm's output [B, T, d] (the LM head's input).
  at::Tensor hidden(const at::Tensor& idx) override;
  // The mean next-token cross-entropy of the head on h (hidden's output): where the head is a
  // plain bias-free Linear whose GEMM runs in BF16 (bf16 and fp8 precisions under autocast) the
  // head and the loss run chunked in one op (ops::linear_cross_entropy: the logits never exist
  // whole, the head's gradients are made in the forward); otherwise lm_head, then loss().
  at::Tensor head_loss(const at::Tensor& h, const at::Tensor& targets) override;
  // train.recompute: what every block recomputes in the backward (none by default).
  void set_recompute(Recompute mode) override;
  Recompute recompute() const override { return recompute_; }
  // train.loss_chunk_mib: the chunked head's budget of logits per chunk, in bytes.
  void set_loss_chunk_bytes(int64_t bytes) override { loss_chunk_bytes_ = bytes; }
  // Forward + backward FLOPs per token: 6 * (non-embedding params, a tied head counted once) +
  // attention 12 * n_layer * T * d (QK^T and AV: forward 2 * 2 * T * d per layer without causal
  // savings, times 3 with the backward). docs/benchmarks.md states the same formula.
  double flops_per_token() const override;

  // The units a holder of UnitHooks sees (lib/model/unit_hooks.h): 0 the embeddings, 1..n_layer
  // the blocks ("h<i>."), head_unit() the final norm and the head (ln_f, lm_head); a tied head
  // also reads unit 0.
  static constexpr int kEmbeddingUnit = 0;
  int head_unit() const { return static_cast<int>(cfg_.n_layer) + 1; }
  int num_units() const override { return head_unit() + 1; }
  int unit_of(const std::string& parameter) const override;
  std::vector<int> units_read_by(int unit) const override;
  void set_unit_hooks(std::shared_ptr<UnitHooks> hooks) override { hooks_ = std::move(hooks); }

  const ModelSection& config() const { return cfg_; }
  torch::nn::Embedding wte{nullptr};
  torch::nn::Embedding wpe{nullptr};  // learned positions only
  std::shared_ptr<Rotary> rotary;     // RoPE only
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<UnaryModule> ln_f;
  std::shared_ptr<UnaryModule> lm_head;

 protected:
  // A family built on this decoder with other feed-forward parts (lib/model/moe_model.h): `ffn`
  // makes each block's (null: the dense Mlp).
  Gpt(const ModelSection& cfg, const FeedForwardFactory& ffn);

 private:
  void enter_unit(int unit);
  at::Tensor leave_unit(int unit, const at::Tensor& out);
  Residual leave_unit(int unit, const Residual& out);

  ModelSection cfg_;
  torch::nn::Dropout drop_{nullptr};
  Recompute recompute_ = Recompute::kNone;
  int64_t loss_chunk_bytes_ = ops::kLinearCrossEntropyChunkBytes;
  std::shared_ptr<UnitHooks> hooks_;
  // A tied head's weight gradient handed to the embedding's backward (ops::tied_embedding), where
  // head_loss runs the chunked head (BF16 autocast on `device`) and without unit hooks (the
  // sharded holder's hooks see each unit's gradients as they come).
  std::shared_ptr<ops::TiedGradient> tied_grad_;
  bool hands_over_tied_grad(c10::DeviceType device) const;
};

}  // namespace model
}  // namespace fp8t
