// fp8train's parameters under Hugging Face transformers' names and layouts, both ways:
// `fp8train export --names hf` (apps/fp8train/cmd_export.cpp) and `model.init_from`.
//
// GPT-2 (GPT2LMHeadModel; model.position learned, layernorm, gelu, bias, fused q/k/v, n_kv_head =
// n_head): transformer.wte / wpe / h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj} / ln_f, lm_head. HF's Conv1D stores weights as [in, out]: fp8train's [out, in]
// weights are transposed. c_attn holds rows [q | k | v] in both.
//
// LLaMA (LlamaForCausalLM; rope, rmsnorm, swiglu): model.embed_tokens, model.layers.<i>.
// {input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj},
// model.norm, lm_head. fp8train's fused c_attn is cut into q/k/v_proj by rows, and c_fc (rows
// [gate | up]) into gate_proj and up_proj. fp8train's RoPE uses HF's half-split (rotate_half)
// pairing, so q and k rows need no permutation.
//
// OLMoE (OlmoeForCausalLM; moe.experts > 0, model.qk_norm): LLaMA's names plus self_attn.{q,k}_norm,
// mlp.gate (the router) and mlp.experts.<e>.{gate,up,down}_proj, cut by rows from fp8train's grouped
// weights (experts_fc [E, 2F, d], rows [gate | up] per expert; experts_proj [E, d, F]).
//
// A tied head is not stored (HF ties it from tie_word_embeddings in config.json).
#pragma once

#include <filesystem>  // std::filesystem::path
#include <string>      // std::string

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/config/experiment.h"   // ModelSection
#include "lib/model/safetensors.h"   // NamedTensors

namespace fp8t {
namespace model {

enum class HfFamily { kGpt2, kLlama, kOlmoe };

// The HF architecture this model config maps onto. Throws fp8t::Error (kBadInput) naming the
// config key that has no HF counterpart (e.g. rope with layernorm).
HfFamily hf_family(const ModelSection& cfg);

// fp8train's named parameters -> HF's named tensors (same values, HF layouts).
NamedTensors to_hf_names(const ModelSection& cfg, const NamedTensors& params);

// config.json for transformers (GPT2Config or LlamaConfig); dtype "float32" or "bfloat16".
nlohmann::json hf_config_json(const ModelSection& cfg, const std::string& dtype);

// model.init_from: copies the tensors of a safetensors file into `params` (fp8train's unique
// named parameters). The file may use fp8train's names (as `export --names fp8train` writes
// them, detected by "h0.ln_1.weight") or HF's (GPT-2's may lack the "transformer." prefix); any
// floating dtype is converted. Throws fp8t::Error (kBadInput) naming the file and the tensor
// for a missing, unexpected or wrongly shaped tensor.
void load_weights(const ModelSection& cfg, const NamedTensors& params, const std::filesystem::path& file);

}  // namespace model
}  // namespace fp8t
