#include "lib/model/gpt.h"

#include <cctype>  // std::isdigit
#include <cmath>   // std::sqrt
#include <string>  // std::stoi

#include "lib/model/hf_layout.h"           // load_weights
#include "lib/model/recompute.h"           // recompute_in_backward
#include "lib/ops/linear_cross_entropy.h"  // ops::linear_cross_entropy
#include "lib/ops/tied_embedding.h"        // ops::tied_embedding
#include "lib/util/error.h"                // FP8T_CHECK
#include "lib/util/torch_compat.h"         // compat::autocast_dtype_or

namespace fp8t {
namespace model {

namespace {

// norm(x + h) and x + h: through the slot's module in one call when it takes the add
// (ResidualNorm: fused on the GPU), else the add and then the norm.
AddNormOutput add_then_norm(UnaryModule& norm, const at::Tensor& x, const at::Tensor& h) {
  if (auto* fused = dynamic_cast<ResidualNorm*>(&norm)) return fused->forward_add(x, h);
  const at::Tensor r = x + h;
  return {r, norm.forward(r)};
}

std::shared_ptr<UnaryModule> make_norm(const ModelSection& cfg) {
  const auto kind = cfg.norm == NormKind::kRMSNorm ? Norm::Kind::kRMSNorm : Norm::Kind::kLayerNorm;
  return std::make_shared<Norm>(kind, cfg.d_model, cfg.norm_eps, cfg.bias);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const ModelSection& cfg, std::shared_ptr<Rotary> rotary)
    : n_head_(cfg.n_head),
      n_kv_head_(cfg.kv_heads()),
      head_dim_(cfg.d_model / cfg.n_head),
      rotary_(std::move(rotary)),
      dropout_(cfg.dropout) {
  const int64_t d = cfg.d_model, kv = n_kv_head_ * head_dim_;
  if (cfg.fused_qkv) {
    add_slot("c_attn", std::make_shared<Linear>(d, d + 2 * kv, cfg.bias), &c_attn);
  } else {
    add_slot("q_proj", std::make_shared<Linear>(d, d, cfg.bias), &q_proj);
    add_slot("k_proj", std::make_shared<Linear>(d, kv, cfg.bias), &k_proj);
    add_slot("v_proj", std::make_shared<Linear>(d, kv, cfg.bias), &v_proj);
  }
  // c_proj reads attention's output through a view (forward): the fused SDPA kernels keep that
  // output for their backward, and write it [B, T, H, D] in memory, so the view needs no copy.
  add_slot("c_proj", std::make_shared<Linear>(d, d, cfg.bias), &c_proj, /*feeds=*/"", /*fed_by=*/"",
           /*input_kept_by_producer=*/true);
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<Norm>(Norm::Kind::kRMSNorm, d, cfg.norm_eps, false));
    k_norm = register_module("k_norm", std::make_shared<Norm>(Norm::Kind::kRMSNorm, kv, cfg.norm_eps, false));
  }
  resid_drop_ = register_module("resid_drop", torch::nn::Dropout(cfg.dropout));
}

at::Tensor CausalSelfAttention::forward(const at::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  at::Tensor q, k, v;
  if (c_attn && rotary_ && !q_norm) {
    // RoPE on the fused projection's output: one kernel on the GPU (Rotary::apply_qkv).
    const Rotary::Heads h = rotary_->apply_qkv(c_attn->forward(x), n_head_, n_kv_head_);
    return attend(h.q, h.k, h.v, B, T, C);
  }
  if (c_attn) {
    // One GEMM, rows [q | k | v]; split's backward is one cat into that layout.
    const std::vector<at::Tensor> qkv =
        c_attn->forward(x).split_with_sizes({C, n_kv_head_ * head_dim_, n_kv_head_ * head_dim_}, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = q_proj->forward(x), k = k_proj->forward(x), v = v_proj->forward(x);
  }
  if (q_norm) {  // model.qk_norm: over the projections' full width, before the heads split and RoPE
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  // [B, T, H*D] -> [B, H, T, D]
  q = q.view({B, T, n_head_, head_dim_}).transpose(1, 2);
  k = k.view({B, T, n_kv_head_, head_dim_}).transpose(1, 2);
  v = v.view({B, T, n_kv_head_, head_dim_}).transpose(1, 2);
  if (rotary_) {
    q = rotary_->apply(q);
    k = rotary_->apply(k);
  }
  return attend(q, k, v, B, T, C);
}

at::Tensor CausalSelfAttention::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t B,
                                       int64_t T, int64_t C) {
  if (kernel_) {  // a replacement kernel (the FP8 rewrite's Fp8Attention under fp8.attention)
    return resid_drop_->forward(c_proj->forward(kernel_->forward(q, k, v).transpose(1, 2).reshape({B, T, C})));
  }
  // enable_gqa: query head h reads K/V head h / (n_head / n_kv_head), without materialising copies.
  const at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, is_training() ? dropout_ : 0.0,
                                                        /*is_causal=*/true, /*scale=*/std::nullopt,
                                                        /*enable_gqa=*/n_kv_head_ != n_head_);
  return resid_drop_->forward(c_proj->forward(y.transpose(1, 2).reshape({B, T, C})));
}

Mlp::Mlp(const ModelSection& cfg)
    : Mlp(cfg.d_model, cfg.ff_dim(), cfg.activation == fp8t::Activation::kSwiGLU, cfg.bias, cfg.dropout) {}

Mlp::Mlp(int64_t d_model, int64_t ff, bool swiglu, bool bias, double dropout) {
  add_slot("c_fc", std::make_shared<Linear>(d_model, swiglu ? 2 * ff : ff, bias), &c_fc);
  // The activation reads only c_fc's output and only c_proj reads its result (a rewrite may
  // fuse it into either GEMM's casts).
  add_slot("act",
           std::make_shared<model::Activation>(swiglu ? model::Activation::Kind::kSwiGLU
                                                      : model::Activation::Kind::kGeluTanh),
           &act, /*feeds=*/"c_proj", /*fed_by=*/"c_fc");
  add_slot("c_proj", std::make_shared<Linear>(ff, d_model, bias), &c_proj);
  drop_ = register_module("drop", torch::nn::Dropout(dropout));
}

at::Tensor Mlp::forward(const at::Tensor& x) { return drop_->forward(c_proj->forward(act->forward(c_fc->forward(x)))); }

void Mlp::init_output_weights(double std) {
  torch::NoGradGuard no_grad;
  std::static_pointer_cast<Linear>(c_proj)->weight.normal_(0.0, std);
}

Block::Block(const ModelSection& cfg, std::shared_ptr<Rotary> rotary, std::shared_ptr<FeedForward> ffn) {
  // With separate q/k/v projections ln_1 has three consumers (no single one to fuse a cast into).
  add_slot("ln_1", make_norm(cfg), &ln_1, /*feeds=*/cfg.fused_qkv ? "attn.c_attn" : "");
  std::shared_ptr<FeedForward> ff = ffn ? std::move(ffn) : std::make_shared<Mlp>(cfg);
  add_slot("ln_2", make_norm(cfg), &ln_2, /*feeds=*/ff->input_linear().empty() ? "" : "mlp." + ff->input_linear());
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(cfg, std::move(rotary)));
  mlp = register_module("mlp", std::move(ff));
}

std::shared_ptr<Mlp> Block::dense_mlp() const {
  auto dense = std::dynamic_pointer_cast<Mlp>(mlp);
  FP8T_CHECK(dense != nullptr, "block: its feed-forward part is not a dense MLP");
  return dense;
}

void Block::set_recompute(Recompute mode) { recompute_ = mode; }

at::Tensor Block::forward(const at::Tensor& x) { return forward(Residual{x, at::Tensor()}).sum(); }

Residual Block::forward(const Residual& in) {
  if (recompute_ == Recompute::kNone) return forward_fused(in);
  const at::Tensor x = in.sum();
  if (recompute_ != Recompute::kBlock) return {forward_parts(x), at::Tensor()};
  // Keeps only the block's input (the residual stream).
  return {recompute_in_backward(*this, [this](const std::vector<at::Tensor>& in) { return forward_parts(in[0]); }, {x}),
          at::Tensor()};
}

// The residual reaches each norm as x + pending and every add is fused into the norm after it;
// the MLP's output is left pending for the next block's ln_1 (or ln_f). On the CPU each fused call
// runs the add and the norm as separate ops, so the graph (and every bit) is that of the unfused
// block.
Residual Block::forward_fused(const Residual& in) {
  at::Tensor x = in.x, y1;
  if (in.pending.defined()) {
    AddNormOutput o = add_then_norm(*ln_1, in.x, in.pending);
    x = std::move(o.sum);
    y1 = std::move(o.y);
  } else {
    y1 = ln_1->forward(x);
  }
  const AddNormOutput o2 = add_then_norm(*ln_2, x, attn->forward(y1));
  return {o2.sum, mlp->forward(o2.y)};
}

// Each sub-layer's part includes its residual add: the residual's gradient is then summed from
// its uses (the add and the norm's, which are two with RMSNorm) in the same order as without
// recompute, so the sum is the same bit for bit. The MLP's part also starts with the attention's
// add (fused into ln_2, as without recompute), whose inputs' gradients it returns first, as the
// add's backward comes first without recompute. Inside the whole block (recompute block, or a
// plain forward of one tensor) the attention's add is fused into ln_2 too.
at::Tensor Block::forward_parts(const at::Tensor& x) {
  if (recompute_ == Recompute::kAttention) {
    // Keeps only x: not ln_1's output, q/k/v, RoPE's rotated q and k, nor what attention keeps
    // (its output and log-sum-exp), nor c_proj's input.
    const at::Tensor h = recompute_in_backward(
        *this, [this](const std::vector<at::Tensor>& in) { return attention_residual(in[0]); }, {x});
    return mlp_residual(h);
  }
  if (recompute_ == Recompute::kMlp) {
    // The attention's add is the part's first op, fused into ln_2: the part keeps x (which ln_1
    // keeps anyway) and the attention's output a (2 bytes per element in bf16), not h = x + a
    // (4), nor ln_2's output, c_fc's output (ff or 2ff wide) or c_proj's input.
    const at::Tensor a = attn->forward(ln_1->forward(x));
    return recompute_in_backward(
        *this,
        [this](const std::vector<at::Tensor>& in) {
          const AddNormOutput o = add_then_norm(*ln_2, in[0], in[1]);
          return o.sum + mlp->forward(o.y);
        },
        {x, a});
  }
  const AddNormOutput o = add_then_norm(*ln_2, x, attn->forward(ln_1->forward(x)));
  return o.sum + mlp->forward(o.y);
}

at::Tensor Block::attention_residual(const at::Tensor& x) { return x + attn->forward(ln_1->forward(x)); }

at::Tensor Block::mlp_residual(const at::Tensor& h) { return h + mlp->forward(ln_2->forward(h)); }

Gpt::Gpt(const ModelSection& cfg) : Gpt(cfg, FeedForwardFactory()) {}

Gpt::Gpt(const ModelSection& cfg, const FeedForwardFactory& ffn) : cfg_(cfg) {
  wte = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.d_model));
  if (cfg.position == PositionKind::kLearned) {
    wpe = register_module("wpe", torch::nn::Embedding(cfg.seq_len, cfg.d_model));
  } else {
    rotary = register_module("rotary", std::make_shared<Rotary>(cfg.seq_len, cfg.d_model / cfg.n_head, cfg.rope_theta));
  }
  drop_ = register_module("drop", torch::nn::Dropout(cfg.dropout));
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    const std::string name = std::string("h").append(std::to_string(i));  // (no GCC 12 stringop false positive)
    blocks.push_back(register_module(name, std::make_shared<Block>(cfg, rotary, ffn ? ffn(i) : nullptr)));
  }
  add_slot("ln_f", make_norm(cfg), &ln_f, /*feeds=*/"lm_head");

  // GPT-2 initialisation: N(0, 0.02) everywhere, residual projections scaled by
  // 1/sqrt(2 * n_layer) so the residual stream's variance does not grow with depth.
  torch::NoGradGuard no_grad;
  wte->weight.normal_(0.0, 0.02);
  if (wpe) wpe->weight.normal_(0.0, 0.02);
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  for (auto& b : blocks) {
    std::static_pointer_cast<Linear>(b->attn->c_proj)->weight.normal_(0.0, proj_std);
    b->mlp->init_output_weights(proj_std);
  }
  // A tied head shares the embedding matrix (the same tensor, counted once).
  add_slot("lm_head",
           cfg.tie_embeddings ? std::make_shared<Linear>(wte->weight)
                              : std::make_shared<Linear>(cfg.d_model, cfg.vocab_size, /*bias=*/false),
           &lm_head);
  if (cfg.tie_embeddings) tied_grad_ = std::make_shared<ops::TiedGradient>();
  // Published or exported weights replace the random ones (before any FP8 rewrite or optimizer).
  if (!cfg.init_from.empty()) load_weights(cfg, unique_named_parameters(), cfg.init_from);
}

at::Tensor Gpt::forward(const at::Tensor& idx) { return leave_unit(head_unit(), lm_head->forward(hidden(idx))); }

at::Tensor Gpt::hidden(const at::Tensor& idx) {
  const int64_t T = idx.size(1);
  enter_unit(kEmbeddingUnit);
  at::Tensor x = hands_over_tied_grad(idx.device().type()) ? ops::tied_embedding(wte->weight, idx, tied_grad_)
                                                            : wte->forward(idx);
  if (wpe) x = x + wpe->forward(torch::arange(T, idx.options()));
  x = leave_unit(kEmbeddingUnit, x);
  Residual stream{drop_->forward(x), at::Tensor()};
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int unit = static_cast<int>(i) + 1;
    enter_unit(unit);
    stream = leave_unit(unit, blocks[i]->forward(stream));
  }
  // The head's unit runs from ln_f to the loss (head_loss) or the logits (forward).
  enter_unit(head_unit());
  // Without recompute the last block's MLP add is fused into ln_f.
  return stream.pending.defined() ? add_then_norm(*ln_f, stream.x, stream.pending).y : ln_f->forward(stream.x);
}

bool Gpt::hands_over_tied_grad(c10::DeviceType device) const {
  return tied_grad_ && !hooks_ && compat::autocast_dtype_or(device, at::kFloat) == at::kBFloat16;
}

void Gpt::enter_unit(int unit) {
  if (hooks_) hooks_->before_forward(unit);
}

at::Tensor Gpt::leave_unit(int unit, const at::Tensor& out) {
  return hooks_ ? hooks_->after_forward(unit, {out}).at(0) : out;
}

Residual Gpt::leave_unit(int unit, const Residual& out) {
  if (!hooks_) return out;
  if (!out.pending.defined()) return {hooks_->after_forward(unit, {out.x}).at(0), at::Tensor()};
  const std::vector<at::Tensor> r = hooks_->after_forward(unit, {out.x, out.pending});
  return {r.at(0), r.at(1)};
}

at::Tensor Gpt::head_loss(const at::Tensor& h, const at::Tensor& targets) {
  // fp32 keeps today's exact ATen composition (the CPU emulation's bits); fp16 needs the loss
  // scale in the head's backward, which the chunked op's forward-time gradient does not see. An
  // FP8 head (not in fp8.skip_layers) is not a plain Linear.
  const auto* head = dynamic_cast<const Linear*>(lm_head.get());
  if (head != nullptr && !head->bias.defined() &&
      compat::autocast_dtype_or(h.device().type(), h.scalar_type()) == at::kBFloat16) {
    const bool tied = hands_over_tied_grad(h.device().type()) && head->weight.is_same(wte->weight);
    return leave_unit(head_unit(), ops::linear_cross_entropy(h, head->weight, targets, /*chunk_rows=*/0,
                                                             loss_chunk_bytes_, tied ? tied_grad_ : nullptr));
  }
  return leave_unit(head_unit(), loss(lm_head->forward(h), targets));
}

void Gpt::set_recompute(Recompute mode) {
  recompute_ = mode;
  // activation: no part of a block runs twice; the FP8 rewrite reads recompute() (its activation
  // casts c_proj's wgrad copy again in the backward).
  for (auto& b : blocks) b->set_recompute(mode == Recompute::kActivation || mode == Recompute::kCasts ? Recompute::kNone : mode);
}

int Gpt::unit_of(const std::string& parameter) const {
  const auto starts = [&](const char* prefix) { return parameter.rfind(prefix, 0) == 0; };
  if (starts("ln_f.") || starts("lm_head.")) return head_unit();
  // Block i is registered as "h<i>".
  if (parameter.size() > 1 && parameter[0] == 'h' && std::isdigit(static_cast<unsigned char>(parameter[1]))) {
    return std::stoi(parameter.substr(1)) + 1;
  }
  return kEmbeddingUnit;
}

std::vector<int> Gpt::units_read_by(int unit) const {
  if (unit == head_unit() && cfg_.tie_embeddings) return {unit, kEmbeddingUnit};  // the head reads the embedding
  return {unit};
}

double Gpt::flops_per_token() const {
  const double n_embd_params = (wpe ? static_cast<double>(wpe->weight.numel()) : 0.0) +
                               (cfg_.tie_embeddings ? 0.0 : static_cast<double>(wte->weight.numel()));
  const double dense = static_cast<double>(parameter_count()) - n_embd_params;
  const double attn = 6.0 * 2.0 * static_cast<double>(cfg_.n_layer * cfg_.seq_len * cfg_.d_model);
  return 6.0 * dense + attn;
}

}  // namespace model
}  // namespace fp8t
