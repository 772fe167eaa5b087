// The convergence-study configs (docs/convergence.md): configs/llama-125m.yaml and
// configs/gpt2-124m-32k.yaml, the model shapes and the study's hyperparameters their comments
// promise, both on the same 32768-token shards.
#include <cstdlib>     // std::getenv
#include <filesystem>  // std::filesystem

#include "tests/config/config_test_util.h"

#include "lib/config/fields.h"  // differing_keys
#include "lib/config/loader.h"

namespace fs = std::filesystem;
using fp8t::ExperimentConfig;
using fp8t::config::Override;
using fp8t::config::testing::bad_input_message;

namespace {

fs::path study_config(const std::string& name) {
  if (const char* env = std::getenv("FP8T_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return fs::path(env) / "configs" / name;
  }
  for (fs::path dir = fs::current_path();; dir = dir.parent_path()) {
    if (fs::exists(dir / "configs" / name)) return dir / "configs" / name;
    if (dir == dir.parent_path()) break;
  }
  return fs::path("configs") / name;
}

ExperimentConfig load_study(const std::string& name) {
  const std::vector<Override> shards = {Override{"data.train_path", "/dummy/data_train_000001.bin", "--set"},
                                        Override{"data.val_path", "/dummy/data_val_000000.bin", "--set"}};
  return fp8t::config::load(study_config(name).string(), shards).config;
}

}  // namespace

TEST_CASE("configs/llama-125m.yaml is the LLaMA-style study model", "[config]") {
  // Without data paths the error names the key to set.
  const std::string msg = bad_input_message([] { fp8t::config::load(study_config("llama-125m.yaml").string(), {}); });
  CHECK_THAT(msg, FP8T_CONTAINS("data.train_path"));
  const ExperimentConfig c = load_study("llama-125m.yaml");
  const fp8t::ModelSection& m = c.model;
  CHECK(std::vector<int64_t>{m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.d_ff, m.vocab_size, m.seq_len} ==
        std::vector<int64_t>{12, 768, 12, 4, 2048, 32768, 1024});
  CHECK(m.norm == fp8t::NormKind::kRMSNorm);
  CHECK(m.activation == fp8t::Activation::kSwiGLU);
  CHECK(m.position == fp8t::PositionKind::kRope);
  CHECK_FALSE(m.tie_embeddings);
  CHECK_FALSE(m.bias);
  CHECK(m.dropout == 0.0);
  CHECK(c.data.source == fp8t::DataSource::kTokens);
  CHECK(c.data.order == fp8t::DataOrder::kSequential);
  CHECK(c.data.val_path == std::vector<std::string>{"/dummy/data_val_000000.bin"});
  // About 40M tokens: 610 steps of 65536.
  const int64_t tokens_per_step = c.train.micro_batch_size * c.train.grad_accum_steps * m.seq_len;
  CHECK(tokens_per_step == 65536);
  CHECK(c.train.steps * tokens_per_step == 39976960);
  CHECK(c.train.warmup_steps == 60);
  CHECK(c.train.schedule == fp8t::LrSchedule::kCosine);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.min_lr == 1e-4);
  CHECK(c.train.eval_interval == 50);
  CHECK(c.train.eval_batches == 16);
  CHECK(c.train.checkpoint_interval == 0);
  CHECK_FALSE(c.train.gemm_autotune);
  CHECK(c.precision == fp8t::Precision::kBf16);
}

TEST_CASE("configs/gpt2-124m-32k.yaml is GPT-2 small with the study's data and schedule", "[config]") {
  const ExperimentConfig gpt2 = load_study("gpt2-124m-32k.yaml");
  const ExperimentConfig llama = load_study("llama-125m.yaml");
  CHECK(gpt2.model.norm == fp8t::NormKind::kLayerNorm);
  CHECK(gpt2.model.activation == fp8t::Activation::kGelu);
  CHECK(gpt2.model.position == fp8t::PositionKind::kLearned);
  CHECK(gpt2.model.tie_embeddings);
  CHECK(gpt2.model.d_ff == 0);  // 4 x d_model
  // Everything but the model's shape is the LLaMA study's: the same shards, steps and schedule.
  CHECK(fp8t::config::differing_keys(llama, gpt2) ==
        std::vector<std::string>{"run.name", "model.d_ff", "model.norm", "model.activation", "model.tie_embeddings",
                                 "model.position", "model.n_kv_head"});
}
