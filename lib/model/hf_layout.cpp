#include "lib/model/hf_layout.h"

#include <torch/torch.h>  // torch::NoGradGuard

#include <cctype>  // std::isdigit
#include <map>     // std::map
#include <set>     // std::set
#include <vector>  // std::vector

#include "lib/util/error.h"  // FP8T_CHECK, FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t {
namespace model {
namespace {

// One fp8train parameter as HF stores it: consecutive row blocks of fp8train's [out, in] (or
// [out]) tensor, each under its own HF name, transposed for GPT-2's Conv1D weights.
struct HfPiece {
  std::string name;
  int64_t rows;
};
struct HfTensor {
  std::vector<HfPiece> pieces;
  bool transposed = false;
};

// "h3.attn.c_attn.weight" -> layer 3, module "attn.c_attn", kind "weight"; "wte.weight" -> -1.
struct ParsedName {
  int64_t layer = -1;
  std::string module;
  std::string kind;
};

ParsedName parse_name(const std::string& name) {
  ParsedName p;
  const size_t dot = name.rfind('.');
  FP8T_CHECK(dot != std::string::npos, "parameter name '", name, "' has no '.'");
  p.kind = name.substr(dot + 1);
  p.module = name.substr(0, dot);
  if (p.module.size() > 1 && p.module[0] == 'h' && std::isdigit(static_cast<unsigned char>(p.module[1]))) {
    const size_t d = p.module.find('.');
    p.layer = std::stoll(p.module.substr(1, d - 1));
    p.module = p.module.substr(d + 1);
  }
  return p;
}

HfTensor gpt2_tensor(const ParsedName& p, int64_t rows) {
  if (p.layer < 0) {
    const std::string prefix = p.module == "lm_head" ? "" : "transformer.";
    return {{{prefix + p.module + "." + p.kind, rows}}, false};
  }
  const bool conv1d = p.kind == "weight" && p.module != "ln_1" && p.module != "ln_2";
  return {{{"transformer.h." + std::to_string(p.layer) + "." + p.module + "." + p.kind, rows}}, conv1d};
}

HfTensor llama_tensor(const ModelSection& cfg, const ParsedName& p, int64_t rows) {
  if (p.layer < 0) {
    static const std::map<std::string, std::string> top = {
        {"wte", "model.embed_tokens"}, {"ln_f", "model.norm"}, {"lm_head", "lm_head"}};
    const auto it = top.find(p.module);
    return it == top.end() ? HfTensor{} : HfTensor{{{it->second + "." + p.kind, rows}}, false};
  }
  const std::string layer = "model.layers." + std::to_string(p.layer) + ".";
  auto one = [&](const std::string& m) { return HfTensor{{{layer + m + "." + p.kind, rows}}, false}; };
  if (p.module == "ln_1") return one("input_layernorm");
  if (p.module == "ln_2") return one("post_attention_layernorm");
  if (p.module == "attn.c_proj") return one("self_attn.o_proj");
  if (p.module == "attn.q_proj" || p.module == "attn.k_proj" || p.module == "attn.v_proj") {
    return one("self_attn." + p.module.substr(5));
  }
  if (p.module == "mlp.c_proj") return one("mlp.down_proj");
  if (p.module == "attn.c_attn") {
    const int64_t kv = cfg.kv_heads() * (cfg.d_model / cfg.n_head);
    return {{{layer + "self_attn.q_proj." + p.kind, cfg.d_model},
             {layer + "self_attn.k_proj." + p.kind, kv},
             {layer + "self_attn.v_proj." + p.kind, kv}},
            false};
  }
  if (p.module == "mlp.c_fc") {  // SwiGLU rows [gate | up]
    return {{{layer + "mlp.gate_proj." + p.kind, cfg.ff_dim()}, {layer + "mlp.up_proj." + p.kind, cfg.ff_dim()}}, false};
  }
  return {};
}

// OLMoE (OlmoeForCausalLM): LLaMA's names, q/k norms over the projections' full width, and per
// MoE block a router (mlp.gate) and experts mlp.experts.<e>.{gate,up,down}_proj. fp8train's grouped
// weights [E, 2F, d] (rows [gate | up] per expert) and [E, d, F] are cut by rows of their 2-D view
// [E*2F, d], [E*d, F].
HfTensor olmoe_tensor(const ModelSection& cfg, const ParsedName& p, int64_t rows) {
  const std::string layer = "model.layers." + std::to_string(p.layer) + ".";
  const int64_t E = cfg.moe.experts, F = cfg.expert_ff_dim(), d = cfg.d_model;
  if (p.module == "attn.q_norm" || p.module == "attn.k_norm") return {{{layer + "self_attn." + p.module.substr(5) + "." + p.kind, rows}}, false};
  if (p.module == "mlp.router") return {{{layer + "mlp.gate." + p.kind, rows}}, false};
  HfTensor h;
  for (int64_t e = 0; e < E && p.module == "mlp.experts_fc"; ++e) {
    const std::string expert = layer + "mlp.experts." + std::to_string(e) + ".";
    h.pieces.push_back({expert + "gate_proj." + p.kind, F});
    h.pieces.push_back({expert + "up_proj." + p.kind, F});
  }
  for (int64_t e = 0; e < E && p.module == "mlp.experts_proj"; ++e) {
    h.pieces.push_back({layer + "mlp.experts." + std::to_string(e) + ".down_proj." + p.kind, d});
  }
  return h.pieces.empty() ? llama_tensor(cfg, p, rows) : h;
}

HfTensor hf_tensor(const ModelSection& cfg, HfFamily family, const std::string& name, const at::Tensor& t) {
  const ParsedName p = parse_name(name);
  HfTensor h = family == HfFamily::kGpt2    ? gpt2_tensor(p, t.size(0))
               : family == HfFamily::kLlama ? llama_tensor(cfg, p, t.size(0))
                                            : olmoe_tensor(cfg, p, t.size(0));
  FP8T_CHECK(!h.pieces.empty(), "parameter '", name, "' has no Hugging Face name");
  int64_t rows = 0;
  for (const auto& piece : h.pieces) rows += piece.rows;
  FP8T_CHECK(rows == t.size(0), "parameter '", name, "' has ", t.size(0), " rows, its HF pieces ", rows);
  return h;
}

// The shape HF gives one piece of fp8train tensor `t`.
std::vector<int64_t> piece_shape(const at::Tensor& t, const HfPiece& piece, bool transposed) {
  std::vector<int64_t> s = t.sizes().vec();
  s[0] = piece.rows;
  if (transposed && s.size() == 2) std::swap(s[0], s[1]);
  return s;
}

[[noreturn]] void no_counterpart(const std::string& key, const std::string& value) {
  FP8T_THROW(ExitCode::kBadInput, key, " = ", value,
             " has no Hugging Face counterpart: GPT-2 needs model.position learned, norm layernorm, activation gelu, "
             "bias true, fused_qkv true and n_kv_head = n_head; LLaMA needs model.position rope, norm rmsnorm and "
             "activation swiglu; OLMoE (moe.experts > 0) needs LLaMA's, model.qk_norm true, bias false, moe.score "
             "softmax, moe.balance aux_loss or none, moe.shared_experts 0 and moe.first_k_dense 0 (use --names "
             "fp8train to export any model)");
}

// The 2-D view HF's pieces cut by rows: a grouped weight [G, N, K] as [G*N, K].
at::Tensor rows_view(const at::Tensor& t) { return t.dim() == 3 ? t.flatten(0, 1) : t; }

HfFamily olmoe_family(const ModelSection& cfg) {
  if (cfg.position != PositionKind::kRope) no_counterpart("model.position", "learned with moe.experts > 0");
  if (cfg.norm != NormKind::kRMSNorm) no_counterpart("model.norm", "layernorm with moe.experts > 0");
  if (!cfg.qk_norm) no_counterpart("model.qk_norm", "false with moe.experts > 0");
  if (cfg.bias) no_counterpart("model.bias", "true with moe.experts > 0");
  if (cfg.moe.score != RouterScore::kSoftmax) no_counterpart("moe.score", "sigmoid");
  if (cfg.moe.balance == LoadBalance::kBias) no_counterpart("moe.balance", "bias (a selection bias)");
  if (cfg.moe.shared_experts > 0) no_counterpart("moe.shared_experts", std::to_string(cfg.moe.shared_experts));
  if (cfg.moe.first_k_dense > 0) no_counterpart("moe.first_k_dense", std::to_string(cfg.moe.first_k_dense));
  return HfFamily::kOlmoe;
}

}  // namespace

HfFamily hf_family(const ModelSection& cfg) {
  if (cfg.moe.enabled()) return olmoe_family(cfg);
  if (cfg.position == PositionKind::kRope) {
    if (cfg.norm != NormKind::kRMSNorm) no_counterpart("model.norm", "layernorm with model.position rope");
    if (cfg.activation != Activation::kSwiGLU) no_counterpart("model.activation", "gelu with model.position rope");
    return HfFamily::kLlama;
  }
  if (cfg.norm != NormKind::kLayerNorm) no_counterpart("model.norm", "rmsnorm with model.position learned");
  if (cfg.activation != Activation::kGelu) no_counterpart("model.activation", "swiglu with model.position learned");
  if (!cfg.bias) no_counterpart("model.bias", "false with model.position learned");
  if (!cfg.fused_qkv) no_counterpart("model.fused_qkv", "false with model.position learned");
  if (cfg.kv_heads() != cfg.n_head) no_counterpart("model.n_kv_head", std::to_string(cfg.n_kv_head) + " with model.position learned");
  return HfFamily::kGpt2;
}

NamedTensors to_hf_names(const ModelSection& cfg, const NamedTensors& params) {
  const HfFamily family = hf_family(cfg);
  NamedTensors out;
  for (const auto& [name, param] : params) {
    const at::Tensor t = rows_view(param);
    const HfTensor h = hf_tensor(cfg, family, name, t);
    int64_t row = 0;
    for (const HfPiece& piece : h.pieces) {
      at::Tensor part = t.narrow(0, row, piece.rows);
      row += piece.rows;
      out.emplace_back(piece.name, (h.transposed ? part.t() : part).contiguous());
    }
  }
  return out;
}

namespace {

nlohmann::json gpt2_config_json(const ModelSection& cfg, const std::string& dtype) {
  // gelu_pytorch_tanh: the same tanh-approximated GELU op fp8train calls (gelu_new is the
  // same formula written out in Python, so it differs in the last bits).
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", cfg.vocab_size},
            {"n_positions", cfg.seq_len}, {"n_embd", cfg.d_model}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
            {"n_inner", cfg.ff_dim()}, {"activation_function", "gelu_pytorch_tanh"},
            {"layer_norm_epsilon", cfg.norm_eps}, {"resid_pdrop", cfg.dropout}, {"embd_pdrop", cfg.dropout},
            {"attn_pdrop", cfg.dropout}, {"tie_word_embeddings", cfg.tie_embeddings}, {"torch_dtype", dtype}};
}

nlohmann::json llama_config_json(const ModelSection& cfg, const std::string& dtype) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", cfg.vocab_size},
          {"hidden_size", cfg.d_model}, {"intermediate_size", cfg.ff_dim()}, {"num_hidden_layers", cfg.n_layer},
          {"num_attention_heads", cfg.n_head}, {"num_key_value_heads", cfg.kv_heads()},
          {"head_dim", cfg.d_model / cfg.n_head}, {"hidden_act", "silu"}, {"max_position_embeddings", cfg.seq_len},
          {"rms_norm_eps", cfg.norm_eps}, {"rope_theta", cfg.rope_theta},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", cfg.rope_theta}}},
          {"attention_bias", cfg.bias}, {"mlp_bias", cfg.bias}, {"attention_dropout", cfg.dropout},
          {"tie_word_embeddings", cfg.tie_embeddings}, {"torch_dtype", dtype}};
}

}  // namespace

nlohmann::json hf_config_json(const ModelSection& cfg, const std::string& dtype) {
  const HfFamily family = hf_family(cfg);
  if (family == HfFamily::kGpt2) return gpt2_config_json(cfg, dtype);
  nlohmann::json c = llama_config_json(cfg, dtype);
  if (family == HfFamily::kLlama) return c;
  c["architectures"] = {"OlmoeForCausalLM"};
  c["model_type"] = "olmoe";
  c["intermediate_size"] = cfg.expert_ff_dim();
  c["num_experts"] = cfg.moe.experts;
  c["num_experts_per_tok"] = cfg.moe.top_k;
  c["norm_topk_prob"] = cfg.moe.norm_topk;
  c["router_aux_loss_coef"] = cfg.moe.balance == LoadBalance::kAuxLoss ? cfg.moe.aux_loss_coef : 0.0;
  c["output_router_logits"] = false;
  c["clip_qkv"] = nullptr;
  c.erase("mlp_bias");
  c.erase("head_dim");
  return c;
}

namespace {

// Tensors HF files may hold that are no parameters of the model (causal-mask and RoPE buffers).
bool ignorable(const std::string& name, const ModelSection& cfg) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq") ||
         (cfg.tie_embeddings && name == "lm_head.weight");
}

// A file tensor as the float32 values of one piece, checked against the expected shape.
at::Tensor take_piece(const std::map<std::string, at::Tensor>& file, const HfPiece& piece,
                      const std::vector<int64_t>& shape, const std::string& ours, const std::string& where) {
  const auto it = file.find(piece.name);
  FP8T_INPUT_CHECK(it != file.end(), where, ": no tensor '", piece.name, "'",
                   piece.name == ours ? "" : " (the Hugging Face name of fp8train's '" + ours + "')",
                   "; the file was written for another model config");
  const at::Tensor& t = it->second;
  FP8T_INPUT_CHECK(t.sizes() == at::IntArrayRef(shape), where, ": tensor '", piece.name, "' has shape ", t.sizes(),
                   " but the model expects ", at::IntArrayRef(shape), " (check model.d_model, n_head, n_kv_head, d_ff, "
                   "vocab_size, seq_len)");
  FP8T_INPUT_CHECK(at::isFloatingType(t.scalar_type()), where, ": tensor '", piece.name, "' has dtype ",
                   c10::toString(t.scalar_type()), "; expected a floating-point type");
  const at::Tensor values = t.to(at::kFloat);
  const int64_t bad = values.isfinite().logical_not().sum().item<int64_t>();
  FP8T_INPUT_CHECK(bad == 0, where, ": tensor '", piece.name, "' holds ", bad, " non-finite value(s) (NaN or inf) of ",
                   values.numel(), "; a run cannot start from it (every step would be skipped)");
  return values;
}

}  // namespace

void load_weights(const ModelSection& cfg, const NamedTensors& params, const std::filesystem::path& path) {
  const std::string where = "model.init_from " + path.string();
  std::error_code ec;
  FP8T_INPUT_CHECK(!std::filesystem::is_directory(path, ec), where, " is a folder; name the safetensors file "
                   "inside it (`fp8train export --names hf` writes <folder>/model.safetensors)");
  std::map<std::string, at::Tensor> file = read_safetensors(path).tensors;
  // fp8train's names when the first block's norm is found under its own name (HF names it
  // "transformer.h.0.ln_1", "h.0.ln_1" or "model.layers.0.input_layernorm"); else HF's.
  const bool ours = file.count("h0.ln_1.weight") > 0;
  HfFamily family = HfFamily::kGpt2;
  if (!ours) {
    family = hf_family(cfg);
    // GPT2Model files (e.g. the published gpt2) name the trunk without "transformer.".
    if (family == HfFamily::kGpt2) {
      std::map<std::string, at::Tensor> prefixed;
      for (auto& [k, v] : file) prefixed[k.rfind("transformer.", 0) == 0 || k == "lm_head.weight" ? k : "transformer." + k] = v;
      file = std::move(prefixed);
    }
  }
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (const auto& [name, param] : params) {
    const at::Tensor p = ours ? param : rows_view(param);
    const HfTensor h = ours ? HfTensor{{{name, p.size(0)}}, false} : hf_tensor(cfg, family, name, p);
    std::vector<at::Tensor> parts;
    for (const HfPiece& piece : h.pieces) {
      const at::Tensor t = take_piece(file, piece, piece_shape(p, piece, h.transposed), name, where);
      parts.push_back(h.transposed ? t.t() : t);
      used.insert(piece.name);
    }
    p.copy_(parts.size() == 1 ? parts[0] : at::cat(parts, 0));
  }
  for (const auto& [k, v] : file) {
    FP8T_INPUT_CHECK(used.count(k) > 0 || ignorable(k, cfg), where, ": tensor '", k,
                     "' has no place in this model; the file was written for another model config");
  }
}

}  // namespace model
}  // namespace fp8t
