// lib/model/hf_layout.* (Hugging Face names and layouts) and model.init_from in lib/model/gpt.*
#include "lib/model/hf_layout.h"

#include <algorithm>  // std::remove_if
#include <limits>     // std::numeric_limits

#include "lib/model/gpt.h"
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"  // require_bad_input
#include "tests/temp_dir.h"               // TempDir

using namespace fp8t;
using fp8t::data::testing::require_bad_input;

namespace {

ModelSection tiny_gpt2() {
  ModelSection m;
  m.vocab_size = 48;
  m.seq_len = 8;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 32;
  return m;
}

ModelSection tiny_llama(bool fused, bool tied, bool bias) {
  ModelSection m = tiny_gpt2();
  m.position = PositionKind::kRope;
  m.n_kv_head = 2;
  m.norm = NormKind::kRMSNorm;
  m.activation = Activation::kSwiGLU;
  m.fused_qkv = fused;
  m.tie_embeddings = tied;
  m.bias = bias;
  m.d_ff = 48;
  return m;
}

std::map<std::string, at::Tensor> by_name(const model::NamedTensors& v) { return {v.begin(), v.end()}; }

// A model built from `cfg` with init_from = path has exactly `want`'s parameters.
void require_loads_exactly(ModelSection cfg, const std::filesystem::path& path, const model::Gpt& want) {
  cfg.init_from = path.string();
  torch::manual_seed(99);  // other random weights, all overwritten
  model::Gpt got(cfg);
  const auto expected = by_name(want.unique_named_parameters());
  for (const auto& [name, p] : got.unique_named_parameters()) {
    INFO(name);
    CHECK(at::equal(p, expected.at(name)));
  }
}

}  // namespace

TEST_CASE("hf_layout: export -> init_from round-trips bit for bit, both name styles", "[model]") {
  test::TempDir dir("hf_layout");
  const std::vector<std::pair<std::string, ModelSection>> cases = {
      {"gpt2", tiny_gpt2()},
      {"llama fused tied", tiny_llama(true, true, false)},
      {"llama separate untied bias", tiny_llama(false, false, true)}};
  for (const auto& [label, cfg] : cases) {
    INFO(label);
    torch::manual_seed(1);
    model::Gpt src(cfg);
    const model::NamedTensors params = src.unique_named_parameters();
    model::write_safetensors(dir / "own.safetensors", params);
    require_loads_exactly(cfg, dir / "own.safetensors", src);
    model::write_safetensors(dir / "hf.safetensors", model::to_hf_names(cfg, params));
    require_loads_exactly(cfg, dir / "hf.safetensors", src);
  }
}

TEST_CASE("hf_layout: GPT-2 names, Conv1D transposes, an HF GPT2Model file without prefix", "[model]") {
  const ModelSection cfg = tiny_gpt2();
  torch::manual_seed(2);
  model::Gpt gpt(cfg);
  const auto hf = by_name(model::to_hf_names(cfg, gpt.unique_named_parameters()));
  const auto own = by_name(gpt.unique_named_parameters());
  CHECK(hf.size() == own.size());
  CHECK(at::equal(hf.at("transformer.h.1.attn.c_attn.weight"), own.at("h1.attn.c_attn.weight").t()));
  CHECK(hf.at("transformer.h.1.mlp.c_fc.weight").sizes() == at::IntArrayRef({32, 128}));
  CHECK(at::equal(hf.at("transformer.h.0.ln_1.weight"), own.at("h0.ln_1.weight")));
  CHECK(at::equal(hf.at("transformer.wpe.weight"), own.at("wpe.weight")));
  CHECK(at::equal(hf.at("lm_head.weight"), own.at("lm_head.weight")));

  // Published GPT-2 files name the trunk without "transformer." and carry mask buffers.
  test::TempDir dir("hf_layout");
  model::NamedTensors bare;
  for (const auto& [k, v] : hf) bare.emplace_back(k.rfind("transformer.", 0) == 0 ? k.substr(12) : k, v);
  bare.emplace_back("h.0.attn.bias", torch::ones({1, 1, 8, 8}));
  model::write_safetensors(dir / "bare.safetensors", bare);
  require_loads_exactly(cfg, dir / "bare.safetensors", gpt);

  const auto json = model::hf_config_json(cfg, "float32");
  CHECK(json["model_type"] == "gpt2");
  CHECK(json["activation_function"] == "gelu_pytorch_tanh");
  CHECK(json["n_inner"] == 128);
}

TEST_CASE("hf_layout: LLaMA splits c_attn into q/k/v and c_fc into gate/up; no permutation", "[model]") {
  const ModelSection cfg = tiny_llama(true, true, false);
  torch::manual_seed(3);
  model::Gpt gpt(cfg);
  const auto hf = by_name(model::to_hf_names(cfg, gpt.unique_named_parameters()));
  const auto own = by_name(gpt.unique_named_parameters());
  const at::Tensor qkv = own.at("h0.attn.c_attn.weight");
  // q: 4 heads x 8, k and v: 2 heads x 8; RoPE is half-split on both sides: rows kept in order.
  CHECK(at::equal(hf.at("model.layers.0.self_attn.q_proj.weight"), qkv.narrow(0, 0, 32)));
  CHECK(at::equal(hf.at("model.layers.0.self_attn.k_proj.weight"), qkv.narrow(0, 32, 16)));
  CHECK(at::equal(hf.at("model.layers.0.self_attn.v_proj.weight"), qkv.narrow(0, 48, 16)));
  const at::Tensor fc = own.at("h1.mlp.c_fc.weight");
  CHECK(at::equal(hf.at("model.layers.1.mlp.gate_proj.weight"), fc.narrow(0, 0, 48)));
  CHECK(at::equal(hf.at("model.layers.1.mlp.up_proj.weight"), fc.narrow(0, 48, 48)));
  CHECK(hf.count("model.layers.1.mlp.down_proj.weight") == 1);
  CHECK(hf.count("model.layers.1.post_attention_layernorm.weight") == 1);
  CHECK(hf.count("model.norm.weight") == 1);
  CHECK(hf.count("model.embed_tokens.weight") == 1);
  CHECK(hf.count("lm_head.weight") == 0);  // tied: HF ties it from config.json

  const auto json = model::hf_config_json(cfg, "bfloat16");
  CHECK(json["model_type"] == "llama");
  CHECK(json["num_key_value_heads"] == 2);
  CHECK(json["head_dim"] == 8);
  CHECK(json["tie_word_embeddings"] == true);
  CHECK(json["torch_dtype"] == "bfloat16");
}

TEST_CASE("hf_layout: wrong files and unexportable models are bad input naming the tensor or key", "[model]") {
  test::TempDir dir("hf_layout");
  const ModelSection cfg = tiny_llama(true, false, false);
  torch::manual_seed(4);
  model::Gpt gpt(cfg);
  model::NamedTensors hf = model::to_hf_names(cfg, gpt.unique_named_parameters());
  const auto path = dir / "m.safetensors";
  ModelSection load = cfg;
  load.init_from = path.string();

  SECTION("a K/V projection for another head count") {
    for (auto& [k, v] : hf) {
      if (k == "model.layers.1.self_attn.k_proj.weight") v = torch::zeros({32, 32});
    }
    model::write_safetensors(path, hf);
    require_bad_input([&] { model::Gpt g(load); },
                      {"model.init_from", "'model.layers.1.self_attn.k_proj.weight' has shape [32, 32]", "[16, 32]"});
  }
  SECTION("a missing tensor") {
    hf.erase(std::remove_if(hf.begin(), hf.end(), [](const auto& kv) { return kv.first == "lm_head.weight"; }), hf.end());
    model::write_safetensors(path, hf);
    require_bad_input([&] { model::Gpt g(load); }, {"no tensor 'lm_head.weight'"});
  }
  SECTION("an extra tensor") {
    hf.emplace_back("model.layers.7.mlp.up_proj.weight", torch::zeros({2}));
    model::write_safetensors(path, hf);
    require_bad_input([&] { model::Gpt g(load); }, {"'model.layers.7.mlp.up_proj.weight' has no place"});
  }
  SECTION("a missing file") {
    require_bad_input([&] { model::Gpt g(load); }, {path.string(), "does not exist"});
  }
  SECTION("a folder, not a file") {
    ModelSection folder = cfg;
    folder.init_from = dir.path().string();
    require_bad_input([&] { model::Gpt g(folder); }, {"model.init_from", "is a folder", "model.safetensors"});
  }
  SECTION("a NaN or an inf in a tensor: named, with the count") {
    for (auto& [k, v] : hf) {
      if (k == "model.layers.0.mlp.down_proj.weight") {
        v = v.clone();
        v.view(-1)[3] = std::numeric_limits<float>::quiet_NaN();
        v.view(-1)[7] = -std::numeric_limits<float>::infinity();
      }
    }
    model::write_safetensors(path, hf);
    require_bad_input([&] { model::Gpt g(load); },
                      {"model.init_from", "'model.layers.0.mlp.down_proj.weight' holds 2 non-finite value(s)"});
  }
  SECTION("no HF counterpart") {
    ModelSection odd = cfg;
    odd.norm = NormKind::kLayerNorm;
    require_bad_input([&] { model::hf_family(odd); }, {"model.norm", "--names fp8train"});
    odd = tiny_gpt2();
    odd.n_kv_head = 2;
    require_bad_input([&] { model::hf_family(odd); }, {"model.n_kv_head"});
  }
}
