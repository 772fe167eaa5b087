// The model shape of a transformers config.json, the inverse of hf_config_json (hf_layout.h):
// `fp8train eval --weights model.safetensors` of an `export --names hf` folder needs no other
// config.
#pragma once

#include <string>  // std::string

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/config/experiment.h"  // ModelSection

namespace fp8t {
namespace model {

// GPT2Config (model_type "gpt2": learned positions, layernorm, GELU, bias) or LlamaConfig
// ("llama": RoPE, RMSNorm, SwiGLU) as a model section; model.seq_len is n_positions /
// max_position_embeddings (a --set model.seq_len after it evaluates shorter windows of a RoPE
// model). Throws fp8t::Error (kBadInput) naming `where` and the key for another model_type, a
// missing key or a value of the wrong type.
ModelSection hf_model_section(const nlohmann::json& config, const std::string& where);

}  // namespace model
}  // namespace fp8t
