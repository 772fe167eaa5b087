#include "lib/model/hf_config.h"

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fp8t {
namespace model {

namespace {

// config[key] as an integer >= 1.
int64_t positive(const nlohmann::json& config, const char* key, const std::string& where) {
  FP8T_INPUT_CHECK(config.contains(key), where, ": no \"", key, "\"");
  const nlohmann::json& v = config[key];
  FP8T_INPUT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1, where, ": \"", key,
                   "\" must be an integer >= 1, got ", v.dump());
  return v.get<int64_t>();
}

template <class T>
T optional_value(const nlohmann::json& config, const char* key, T fallback, const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  try {
    return config[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    FP8T_THROW(ExitCode::kBadInput, where, ": \"", key, "\" has the wrong type: ", config[key].dump());
  }
}

ModelSection gpt2_section(const nlohmann::json& c, const std::string& where) {
  ModelSection m;
  m.vocab_size = positive(c, "vocab_size", where);
  m.seq_len = positive(c, "n_positions", where);
  m.d_model = positive(c, "n_embd", where);
  m.n_layer = positive(c, "n_layer", where);
  m.n_head = positive(c, "n_head", where);
  m.d_ff = optional_value<int64_t>(c, "n_inner", 0, where);
  m.norm_eps = optional_value<double>(c, "layer_norm_epsilon", 1e-5, where);
  m.tie_embeddings = optional_value<bool>(c, "tie_word_embeddings", true, where);  // GPT2Config's default
  m.norm = NormKind::kLayerNorm;
  m.activation = Activation::kGelu;
  m.position = PositionKind::kLearned;
  m.bias = true;
  return m;
}

ModelSection llama_section(const nlohmann::json& c, const std::string& where) {
  ModelSection m;
  m.vocab_size = positive(c, "vocab_size", where);
  m.seq_len = positive(c, "max_position_embeddings", where);
  m.d_model = positive(c, "hidden_size", where);
  m.d_ff = positive(c, "intermediate_size", where);
  m.n_layer = positive(c, "num_hidden_layers", where);
  m.n_head = positive(c, "num_attention_heads", where);
  m.n_kv_head = optional_value<int64_t>(c, "num_key_value_heads", 0, where);
  m.norm_eps = optional_value<double>(c, "rms_norm_eps", 1e-6, where);
  m.rope_theta = optional_value<double>(c, "rope_theta", 10000.0, where);
  m.bias = optional_value<bool>(c, "attention_bias", false, where);
  m.tie_embeddings = optional_value<bool>(c, "tie_word_embeddings", false, where);  // LlamaConfig's default
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.position = PositionKind::kRope;
  return m;
}

ModelSection olmoe_section(const nlohmann::json& c, const std::string& where) {
  ModelSection m = llama_section(c, where);
  m.qk_norm = true;
  m.norm_eps = optional_value<double>(c, "rms_norm_eps", 1e-5, where);  // OlmoeConfig's default
  m.moe.experts = positive(c, "num_experts", where);
  m.moe.top_k = positive(c, "num_experts_per_tok", where);
  m.moe.d_ff = m.d_ff;
  m.moe.norm_topk = optional_value<bool>(c, "norm_topk_prob", false, where);
  m.moe.aux_loss_coef = optional_value<double>(c, "router_aux_loss_coef", 0.01, where);
  FP8T_INPUT_CHECK(optional_value<double>(c, "clip_qkv", 0.0, where) == 0.0, where,
                   ": \"clip_qkv\" is set; fp8train's attention does not clip q, k and v");
  return m;
}

}  // namespace

ModelSection hf_model_section(const nlohmann::json& config, const std::string& where) {
  FP8T_INPUT_CHECK(config.is_object(), where, ": expected a JSON object (a transformers config.json)");
  const std::string type = optional_value<std::string>(config, "model_type", "", where);
  if (type == "gpt2") return gpt2_section(config, where);
  if (type == "llama") return llama_section(config, where);
  if (type == "olmoe") return olmoe_section(config, where);
  FP8T_THROW(ExitCode::kBadInput, where, ": \"model_type\" is '", type,
             "'; fp8train reads gpt2, llama and olmoe configs (as `fp8train export --names hf` writes them)");
}

}  // namespace model
}  // namespace fp8t
