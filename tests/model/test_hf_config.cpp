// lib/model/hf_config.*: a transformers config.json back to fp8train's model section.
#include "lib/model/hf_config.h"

#include "lib/model/hf_layout.h"  // hf_config_json
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"  // require_bad_input

using namespace fp8t;
using fp8t::data::testing::require_bad_input;

namespace {

// The keys a config.json carries (dropout and init_from are not shape).
void require_same_shape(const ModelSection& a, const ModelSection& b) {
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.seq_len == b.seq_len);
  CHECK(a.n_layer == b.n_layer);
  CHECK(a.n_head == b.n_head);
  CHECK(a.kv_heads() == b.kv_heads());
  CHECK(a.d_model == b.d_model);
  CHECK(a.ff_dim() == b.ff_dim());
  CHECK(a.norm == b.norm);
  CHECK(a.norm_eps == b.norm_eps);
  CHECK(a.activation == b.activation);
  CHECK(a.bias == b.bias);
  CHECK(a.tie_embeddings == b.tie_embeddings);
  CHECK(a.position == b.position);
  if (a.position == PositionKind::kRope) CHECK(a.rope_theta == b.rope_theta);
}

}  // namespace

TEST_CASE("hf_config: hf_config_json read back gives the same model shape (GPT-2 and LLaMA)", "[model]") {
  ModelSection gpt2;
  gpt2.vocab_size = 48;
  gpt2.seq_len = 8;
  gpt2.n_layer = 3;
  gpt2.n_head = 4;
  gpt2.d_model = 32;
  gpt2.d_ff = 96;
  gpt2.norm_eps = 1e-6;
  gpt2.tie_embeddings = true;
  require_same_shape(model::hf_model_section(model::hf_config_json(gpt2, "float32"), "gpt2.json"), gpt2);
  gpt2.tie_embeddings = false;  // GPT2Config's default is tied: false must be read, not defaulted
  require_same_shape(model::hf_model_section(model::hf_config_json(gpt2, "float32"), "gpt2.json"), gpt2);

  ModelSection llama = gpt2;
  llama.position = PositionKind::kRope;
  llama.norm = NormKind::kRMSNorm;
  llama.activation = Activation::kSwiGLU;
  llama.bias = false;
  llama.n_kv_head = 2;
  llama.rope_theta = 500000.0;
  llama.tie_embeddings = true;
  require_same_shape(model::hf_model_section(model::hf_config_json(llama, "bfloat16"), "llama.json"), llama);
}

TEST_CASE("hf_config: another model_type, a missing or mistyped key is bad input naming the file and key",
          "[model]") {
  ModelSection m;
  nlohmann::json j = model::hf_config_json(m, "float32");
  nlohmann::json other = j;
  other["model_type"] = "mistral";
  require_bad_input([&] { model::hf_model_section(other, "x/config.json"); }, {"x/config.json", "mistral"});
  nlohmann::json missing = j;
  missing.erase("n_embd");
  require_bad_input([&] { model::hf_model_section(missing, "x/config.json"); }, {"x/config.json", "n_embd"});
  nlohmann::json typed = j;
  typed["layer_norm_epsilon"] = "small";
  require_bad_input([&] { model::hf_model_section(typed, "x/config.json"); }, {"layer_norm_epsilon"});
  require_bad_input([&] { model::hf_model_section(nlohmann::json::array(), "x/config.json"); }, {"JSON object"});
}
