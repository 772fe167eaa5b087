// The shipped experiment files under configs/: each loads and validates, needs none of the keys
// it holds at their defaults (a key a file leaves out takes its default), and holds the values
// its comments promise.
#include <algorithm>   // std::sort, std::find
#include <cstdlib>     // std::getenv
#include <filesystem>  // std::filesystem

#include "tests/config/config_test_util.h"

#include "lib/config/fields.h"
#include "lib/util/error.h"  // fp8t::Error
#include "lib/config/loader.h"

namespace fs = std::filesystem;
using fp8t::ExperimentConfig;
using fp8t::config::LoadedConfig;
using fp8t::config::Override;
using fp8t::config::testing::bad_input_message;

namespace {

// configs/ of the source tree: $FP8T_SOURCE_DIR/configs, else the first configs/default.yaml
// found walking up from the current directory (the build tree sits inside the source tree).
fs::path configs_dir() {
  if (const char* env = std::getenv("FP8T_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return fs::path(env) / "configs";
  }
  for (fs::path dir = fs::current_path();; dir = dir.parent_path()) {
    if (fs::exists(dir / "configs" / "default.yaml")) return dir / "configs";
    if (dir == dir.parent_path()) break;
  }
  return {};
}

std::vector<fs::path> config_files() {
  std::vector<fs::path> out;
  const fs::path dir = configs_dir();
  if (dir.empty() || !fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml" || entry.path().extension() == ".yml") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

LoadedConfig load_config(const std::string& name, const std::vector<Override>& overrides = {}) {
  return fp8t::config::load((configs_dir() / name).string(), overrides);
}

const std::vector<Override> kDummyData = {Override{"data.train_path", "/dummy/train.bin", "--set"}};

// An experiment file with only `keys` (in table order), at their values in `c`.
std::string yaml_of_keys(const ExperimentConfig& c, const std::vector<std::string>& keys) {
  std::string out;
  std::string section = "\x01";  // none yet
  for (const auto& f : fp8t::config::fields()) {
    if (std::find(keys.begin(), keys.end(), f.key) == keys.end()) continue;
    const std::string value = fp8t::config::format_value(f, f.get(c));
    if (f.section().empty()) {
      out += f.key + ": " + value + "\n";
      section = "";
      continue;
    }
    if (f.section() != section) out += f.section() + ":\n";
    section = f.section();
    out += "  " + f.name() + ": " + value + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("configs/ is found and holds the shipped files", "[config]") {
  const fs::path dir = configs_dir();
  INFO("configs dir: " << dir);
  REQUIRE_FALSE(dir.empty());
  for (const char* name : {"default.yaml", "fp8-cpu.yaml", "gpt2-124m.yaml", "gpt-1.3b.yaml", "char-anna.yaml"}) {
    INFO(name);
    CHECK(fs::exists(dir / name));
  }
}

TEST_CASE("every file in configs/ loads, validates and needs only its non-default keys", "[config]") {
  const auto files = config_files();
  REQUIRE(files.size() >= 5);
  for (const auto& path : files) {
    INFO(path.string());
    LoadedConfig loaded;
    try {
      loaded = fp8t::config::load(path.string(), {});
    } catch (const fp8t::Error& e) {
      // A file that reads data leaves train_path empty: it may fail for that key alone ...
      INFO(e.what());
      CHECK(e.code() == fp8t::ExitCode::kBadInput);
      CHECK(std::string(e.what()).rfind("data.train_path (", 0) == 0);
      // ... and must load once a path is given.
      loaded = fp8t::config::load(path.string(), kDummyData);
      CHECK(loaded.config.data.source != fp8t::DataSource::kSynthetic);
    }
    // The shipped files spell out every key (they document them), but none has to: the same
    // file with only the keys that differ from the defaults resolves to the same config.
    const std::vector<std::string> kept = fp8t::config::differing_keys(loaded.config, ExperimentConfig{});
    const std::string minimal = yaml_of_keys(loaded.config, kept);
    INFO("minimal file:\n" << minimal);
    const LoadedConfig shortened = fp8t::config::load_from_string(minimal, path.string() + " (shortened)");
    CHECK(shortened.config == loaded.config);
    CHECK(shortened.sources.all().size() == kept.size());
    CHECK(kept.size() < fp8t::config::fields().size());
  }
}

TEST_CASE("configs/default.yaml is the built-in defaults in FP8", "[config]") {
  // The quick start's run trains in FP8 (the product's point); the built-in defaults stay fp32.
  const LoadedConfig loaded = load_config("default.yaml");
  CHECK(loaded.config.precision == fp8t::Precision::kFp8);
  CHECK(ExperimentConfig{}.precision == fp8t::Precision::kFp32);
  CHECK(loaded.config.fp8.kind == fp8t::fp8::RecipeKind::kDelayed);
  CHECK(fp8t::config::differing_keys(loaded.config, ExperimentConfig{}) == std::vector<std::string>{"precision"});
}

TEST_CASE("configs/fp8-cpu.yaml is default.yaml on the CPU", "[config]") {
  const ExperimentConfig base = load_config("default.yaml").config;
  const ExperimentConfig fp8 = load_config("fp8-cpu.yaml").config;
  CHECK(fp8.precision == fp8t::Precision::kFp8);
  CHECK(fp8.run.device == fp8t::DeviceKind::kCpu);
  CHECK(fp8t::config::differing_keys(base, fp8) == std::vector<std::string>{"run.name", "run.device"});
}

TEST_CASE("configs/gpt2-124m.yaml is GPT-2 small", "[config]") {
  const ExperimentConfig c = load_config("gpt2-124m.yaml", kDummyData).config;
  CHECK(c.model.n_layer == 12);
  CHECK(c.model.d_model == 768);
  CHECK(c.model.n_head == 12);
  CHECK(c.model.seq_len == 1024);
  CHECK(c.model.vocab_size == 50304);
  CHECK(c.model.norm == fp8t::NormKind::kLayerNorm);
  CHECK(c.model.activation == fp8t::Activation::kGelu);
  CHECK_FALSE(c.model.bias);
  CHECK(c.model.tie_embeddings);
  CHECK(c.data.source == fp8t::DataSource::kTokens);
  CHECK(c.train.micro_batch_size == 16);
  CHECK(c.train.lr == 6e-4);
  CHECK(c.train.min_lr == 6e-5);
  CHECK(c.train.warmup_steps == 700);
  CHECK(c.train.weight_decay == 0.1);
  CHECK(c.train.beta2 == 0.95);
  CHECK(c.train.grad_clip == 1.0);
  CHECK(c.precision == fp8t::Precision::kBf16);
}

TEST_CASE("configs/gpt-1.3b.yaml is the 1.3B shape", "[config]") {
  const ExperimentConfig c = load_config("gpt-1.3b.yaml", kDummyData).config;
  CHECK(c.model.n_layer == 24);
  CHECK(c.model.d_model == 2048);
  CHECK(c.model.n_head == 16);
  CHECK(c.model.seq_len == 2048);
  CHECK(c.model.vocab_size == 50304);
  CHECK(c.train.micro_batch_size == 8);
  CHECK(c.train.lr == 2e-4);
  CHECK(c.data.source == fp8t::DataSource::kTokens);
  // The GPU benchmark shapes tune their GEMMs (README, "GEMM autotuning"); the built-in default
  // (configs/default.yaml) keeps the heuristic's choices for bit-identical reruns.
  CHECK(c.train.gemm_autotune);
  CHECK_FALSE(ExperimentConfig{}.train.gemm_autotune);
}

TEST_CASE("configs/char-anna.yaml is the byte-level book model", "[config]") {
  const std::string msg = bad_input_message([] { load_config("char-anna.yaml"); });
  CHECK_THAT(msg, FP8T_CONTAINS("--set data.train_path=PATH"));
  const ExperimentConfig c = load_config("char-anna.yaml", kDummyData).config;
  CHECK(c.data.source == fp8t::DataSource::kText);
  CHECK(c.data.train_path == std::vector<std::string>{"/dummy/train.bin"});
  CHECK(c.model.vocab_size == 256);
  CHECK(c.model.n_layer == 6);
  CHECK(c.model.n_head == 6);
  CHECK(c.model.d_model == 384);
  CHECK(c.model.seq_len == 256);
  CHECK(c.model.dropout == 0.2);
  CHECK_FALSE(c.model.bias);
  CHECK(c.train.micro_batch_size == 64);
  CHECK(c.train.steps == 5000);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.warmup_steps == 100);
  CHECK(c.train.min_lr == 1e-4);
  CHECK(c.train.beta2 == 0.99);
  CHECK(c.train.weight_decay == 0.1);
  CHECK(c.train.grad_clip == 1.0);
  CHECK(c.train.eval_interval == 250);
  CHECK(c.train.eval_batches == 200);
}

TEST_CASE("configs/llama3-70b.yaml is the Llama 3 70B shape at 8192 tokens", "[config]") {
  const ExperimentConfig c = load_config("llama3-70b.yaml", kDummyData).config;
  const fp8t::ModelSection& m = c.model;
  CHECK(std::vector<int64_t>{m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.d_ff, m.vocab_size, m.seq_len} ==
        std::vector<int64_t>{80, 8192, 64, 8, 28672, 128256, 8192});
  CHECK(c.train.micro_batch_size * m.seq_len * c.train.grad_accum_steps == 524288);
  // Everything else (RoPE 500000, RMSNorm, SwiGLU, no bias, untied, the recipe) is the 8B file's.
  const ExperimentConfig llama8b = load_config("llama3-8b.yaml", kDummyData).config;
  CHECK(fp8t::config::differing_keys(llama8b, c) ==
        std::vector<std::string>{"run.name", "model.seq_len", "model.n_layer", "model.n_head", "model.d_model",
                                 "model.d_ff", "train.grad_accum_steps", "train.recompute", "dist.zero"});
}
