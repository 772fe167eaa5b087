// Reading experiment files: every section, value spellings, origins, round trip, precedence.
#include "tests/config/config_test_util.h"

#include "lib/config/fields.h"
#include "lib/config/loader.h"
#include "lib/config/print.h"

using fp8t::ExperimentConfig;
using fp8t::ZeroStage;
using fp8t::config::fields;
using fp8t::config::LoadedConfig;
using fp8t::config::Override;
using fp8t::config::testing::from_yaml;
using fp8t::config::testing::TempFile;

namespace {

// Every key set to a non-default value (checked against the struct members directly below, so a
// table entry that points at the wrong member fails here).
const char* kFullFile = R"(# a complete experiment file
run:
  name: full-run
  out_dir: /tmp/fp8t-runs
  seed: 18446744073709551615
  device: cpu
  quiet: true
  overwrite: yes
  tensorboard: true
  accept_data_change: true
model:
  vocab_size: 512
  seq_len: 96
  n_layer: 3
  n_head: 6
  d_model: 192
  d_ff: 500
  norm: rmsnorm
  norm_eps: 1.0e-6
  activation: swiglu
  bias: false
  dropout: 0.25
  tie_embeddings: true
  position: rope
  rope_theta: 500000.0
  n_kv_head: 2
  fused_qkv: false
  init_from: "weights/model.safetensors"
data:
  source: tokens
  train_path: data/train.bin
  val_path: ["data/val file.bin", data/val_*.bin]
  val_fraction: 0.05
  order: sequential
train:
  steps: 1000
  micro_batch_size: 4
  grad_accum_steps: 8
  lr: 6e-4
  min_lr: 6e-5
  warmup_steps: 100
  schedule: linear
  weight_decay: 0.05
  beta1: 0.8
  beta2: 0.99
  eps: 1e-10
  moments_dtype: bf16
  grad_clip: 0.5
  eval_interval: 50
  eval_batches: 4
  log_interval: 5
  checkpoint_interval: 200
  checkpoint_every_min: 7.5
  keep_checkpoints: 4
  max_skipped_steps: 3
  recompute: none  # the only value allowed with the model's dropout 0.25
  cuda_graphs: false
  loss_chunk_mib: 64
  gemm_autotune: true
  attention_backend: cudnn
  loss_scale_init: 1024
  loss_scale_growth_factor: 4
  loss_scale_backoff: 0.25
  loss_scale_growth_interval: 100
dist:
  timeout_s: 30
  bucket_mb: 4.5
  zero: 1
  reshard_after_forward: false
  reduce_dtype: bf16
  prefetch: 2
  shard_group_size: 4
precision: fp8
fp8:
  recipe: delayed
  block_power_of_2_scales: true
  margin: 2
  interval: 4
  fp8_format: E4M3
  amax_history_len: 16
  amax_compute_algo: most_recent
  amax_update: microbatch
  reduce_amax: false
  override_linear_precision: {fprop: false, dgrad: true, wgrad: true}
  fast_accumulation:
    fprop: false
    dgrad: true
    wgrad: false
  skip_layers: [lm_head, blocks.0.attn.qkv]
  min_features_product: 4096
  stats: true
  swiglu_wgrad_copy: forward
)";

// The 1-based number, as text, of the line of `text` that starts with `start` ("" if none).
std::string line_of(const std::string& text, const std::string& start) {
  size_t begin = 0;
  for (int line = 1; begin < text.size(); ++line) {
    if (text.compare(begin, start.size(), start) == 0) return std::to_string(line);
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return "";
}

}  // namespace

TEST_CASE("a full experiment file sets every key of every section", "[config]") {
  const LoadedConfig loaded = from_yaml(kFullFile);
  const ExperimentConfig& c = loaded.config;

  CHECK(c.run.name == "full-run");
  CHECK(c.run.out_dir == "/tmp/fp8t-runs");
  CHECK(c.run.seed == 18446744073709551615ull);
  CHECK(c.run.device == fp8t::DeviceKind::kCpu);
  CHECK(c.run.quiet);
  CHECK(c.run.overwrite);

  CHECK(c.model.vocab_size == 512);
  CHECK(c.model.seq_len == 96);
  CHECK(c.model.n_layer == 3);
  CHECK(c.model.n_head == 6);
  CHECK(c.model.d_model == 192);
  CHECK(c.model.d_ff == 500);
  CHECK(c.model.norm == fp8t::NormKind::kRMSNorm);
  CHECK(c.model.norm_eps == 1.0e-6);
  CHECK(c.model.activation == fp8t::Activation::kSwiGLU);
  CHECK_FALSE(c.model.bias);
  CHECK(c.model.dropout == 0.25);
  CHECK(c.model.tie_embeddings);
  CHECK(c.model.position == fp8t::PositionKind::kRope);
  CHECK(c.model.rope_theta == 500000.0);
  CHECK(c.model.n_kv_head == 2);
  CHECK_FALSE(c.model.fused_qkv);
  CHECK(c.model.init_from == "weights/model.safetensors");

  CHECK(c.data.source == fp8t::DataSource::kTokens);
  CHECK(c.data.train_path == std::vector<std::string>{"data/train.bin"});  // a single path is a list of one
  CHECK(c.data.val_path == std::vector<std::string>{"data/val file.bin", "data/val_*.bin"});
  CHECK(c.data.val_fraction == 0.05);
  CHECK(c.data.order == fp8t::DataOrder::kSequential);

  CHECK(c.train.steps == 1000);
  CHECK(c.train.micro_batch_size == 4);
  CHECK(c.train.grad_accum_steps == 8);
  CHECK(c.train.lr == 6e-4);
  CHECK(c.train.min_lr == 6e-5);
  CHECK(c.train.warmup_steps == 100);
  CHECK(c.train.schedule == fp8t::LrSchedule::kLinear);
  CHECK(c.train.weight_decay == 0.05);
  CHECK(c.train.beta1 == 0.8);
  CHECK(c.train.beta2 == 0.99);
  CHECK(c.train.eps == 1e-10);
  CHECK(c.train.moments_dtype == fp8t::MomentsDtype::kBf16);
  CHECK(c.train.grad_clip == 0.5);
  CHECK(c.train.eval_interval == 50);
  CHECK(c.train.eval_batches == 4);
  CHECK(c.train.log_interval == 5);
  CHECK(c.train.checkpoint_interval == 200);
  CHECK(c.train.loss_scale_init == 1024.0);
  CHECK(c.train.loss_scale_growth_factor == 4.0);
  CHECK(c.train.loss_scale_backoff == 0.25);
  CHECK(c.train.loss_scale_growth_interval == 100);
  CHECK(c.train.recompute == fp8t::Recompute::kNone);
  CHECK_FALSE(c.train.cuda_graphs);
  CHECK(c.train.loss_chunk_mib == 64);
  CHECK(c.train.gemm_autotune);
  CHECK(c.train.attention_backend == fp8t::AttentionBackend::kCudnn);

  CHECK(c.dist.timeout_s == 30);
  CHECK(c.dist.bucket_mb == 4.5);
  CHECK(c.dist.zero == ZeroStage::kOptimizer);
  CHECK_FALSE(c.dist.reshard_after_forward);
  CHECK(c.dist.reduce_dtype == fp8t::ReduceDtype::kBf16);
  CHECK(c.dist.prefetch == 2);
  CHECK(c.dist.shard_group_size == 4);

  CHECK(c.precision == fp8t::Precision::kFp8);

  CHECK(c.fp8.kind == fp8t::fp8::RecipeKind::kDelayed);
  CHECK(c.fp8.block_power_of_2_scales);  // the default: a delayed-recipe file may only repeat it
  CHECK(c.fp8.margin == 2);
  CHECK(c.fp8.interval == 4);
  CHECK(c.fp8.fp8_format == fp8t::fp8::RecipeFormat::kE4M3);
  CHECK(c.fp8.amax_history_len == 16);
  CHECK(c.fp8.amax_compute_algo == fp8t::fp8::AmaxComputeAlgo::kMostRecent);
  CHECK_FALSE(c.fp8.override_linear_precision.fprop);
  CHECK(c.fp8.override_linear_precision.dgrad);
  CHECK(c.fp8.override_linear_precision.wgrad);
  CHECK_FALSE(c.fp8.fast_accumulation.fprop);
  CHECK(c.fp8.fast_accumulation.dgrad);
  CHECK_FALSE(c.fp8.fast_accumulation.wgrad);
  CHECK(c.fp8.skip_layers == std::vector<std::string>{"lm_head", "blocks.0.attn.qkv"});
  CHECK(c.fp8.min_features_product == 4096);
  CHECK(c.fp8.stats);
  CHECK(c.run.tensorboard);
  CHECK(c.run.accept_data_change);
  CHECK(c.train.checkpoint_every_min == 7.5);
  CHECK(c.train.keep_checkpoints == 4);
  CHECK(c.train.max_skipped_steps == 3);
  CHECK(c.fp8.amax_update == fp8t::fp8::AmaxUpdate::kMicrobatch);
  CHECK(c.fp8.swiglu_wgrad_copy == fp8t::fp8::SwigluWgradCopy::kForward);
  CHECK_FALSE(c.fp8.reduce_amax);

  // Every key the file gives has a line of it as origin (the lines are looked up, so a key added
  // to the file moves no check; a key it leaves out would keep its default: test_minimal_config).
  for (const auto& [key, origin] : loaded.sources.all()) {
    INFO(key);
    CHECK(origin.rfind("test.yaml:", 0) == 0);
  }
  CHECK(loaded.sources.all().size() >= 82);  // the 82 keys of the table when this file was written
  CHECK(loaded.sources.origin("run.name") == "test.yaml:" + line_of(kFullFile, "  name: full-run"));
  CHECK(loaded.sources.origin("model.n_layer") == "test.yaml:" + line_of(kFullFile, "  n_layer: 3"));
  CHECK(loaded.sources.origin("precision") == "test.yaml:" + line_of(kFullFile, "precision: fp8"));
  CHECK(loaded.sources.origin("fp8.fast_accumulation") == "test.yaml:" + line_of(kFullFile, "  fast_accumulation:"));
  CHECK(line_of(kFullFile, "  n_layer: 3") == "14");  // the lookup itself counts from 1
}

TEST_CASE("no file and empty text give the struct defaults", "[config]") {
  const ExperimentConfig defaults;
  const LoadedConfig a = fp8t::config::load("", {});
  CHECK(a.config == defaults);
  CHECK(a.sources.all().empty());
  CHECK(a.sources.origin("model.n_layer") == "default");
  CHECK(from_yaml("").config == defaults);
  CHECK(from_yaml("# only a comment\n").config == defaults);
  // Sections may be empty or partial: unnamed keys keep their defaults.
  const LoadedConfig partial = from_yaml("model:\ntrain:\n  steps: 77\n");
  CHECK(partial.config.train.steps == 77);
  CHECK(fp8t::config::differing_keys(partial.config, defaults) == std::vector<std::string>{"train.steps"});
}

TEST_CASE("load reads a file and names it in origins", "[config]") {
  TempFile file("load.yaml", "precision: bf16\nmodel:\n  n_layer: 5\n");
  const LoadedConfig loaded = fp8t::config::load(file.path(), {});
  CHECK(loaded.config.precision == fp8t::Precision::kBf16);
  CHECK(loaded.config.model.n_layer == 5);
  CHECK(loaded.sources.origin("model.n_layer") == file.path() + ":3");
  CHECK(loaded.sources.origin("precision") == file.path() + ":1");
}

TEST_CASE("enum values are case-insensitive and print canonical", "[config]") {
  struct Case {
    const char* key;
    const char* input;
    const char* canonical;
  };
  const Case c = GENERATE(Case{"precision", "FP8", "fp8"}, Case{"precision", "Bf16", "bf16"},
                          Case{"precision", "fp32", "fp32"}, Case{"run.device", "CUDA", "cuda"},
                          Case{"run.device", "Auto", "auto"}, Case{"run.device", "cpu", "cpu"},
                          Case{"model.norm", "RMSNorm", "rmsnorm"}, Case{"model.norm", "LayerNorm", "layernorm"},
                          Case{"model.activation", "SwiGLU", "swiglu"}, Case{"model.activation", "GELU", "gelu"},
                          Case{"data.source", "Synthetic", "synthetic"}, Case{"train.schedule", "Constant", "constant"},
                          Case{"train.schedule", "COSINE", "cosine"}, Case{"train.schedule", "linear", "linear"},
                          Case{"fp8.fp8_format", "hybrid", "HYBRID"}, Case{"fp8.fp8_format", "e4m3", "E4M3"},
                          Case{"fp8.amax_compute_algo", "MAX", "max"},
                          Case{"fp8.amax_compute_algo", "Most_Recent", "most_recent"});
  INFO(c.key << " = " << c.input);
  const auto* field = fp8t::config::find_field(c.key);
  REQUIRE(field != nullptr);
  // Through --set ...
  const LoadedConfig via_set = fp8t::config::load("", {Override{c.key, c.input, "--set"}});
  CHECK(std::get<std::string>(field->get(via_set.config)) == c.canonical);
  // ... and through YAML, with the canonical spelling in the printed file.
  const std::string key = c.key;
  const auto dot = key.find('.');
  const std::string yaml = dot == std::string::npos
                               ? key + ": " + c.input + "\n"
                               : key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + c.input + "\n";
  const LoadedConfig via_yaml = from_yaml(yaml);
  CHECK(via_yaml.config == via_set.config);
  CHECK_THAT(fp8t::config::to_yaml(via_yaml.config), FP8T_CONTAINS(key.substr(dot == std::string::npos ? 0 : dot + 1) + ": " + c.canonical + "\n"));
}

TEST_CASE("enum helpers name the schema values", "[config]") {
  using fp8t::config::to_string;
  CHECK(std::string(to_string(fp8t::Precision::kBf16)) == "bf16");
  CHECK(std::string(to_string(fp8t::DeviceKind::kCuda)) == "cuda");
  CHECK(std::string(to_string(fp8t::NormKind::kRMSNorm)) == "rmsnorm");
  CHECK(std::string(to_string(fp8t::Activation::kSwiGLU)) == "swiglu");
  CHECK(std::string(to_string(fp8t::DataSource::kTokens)) == "tokens");
  CHECK(std::string(to_string(fp8t::LrSchedule::kConstant)) == "constant");
}

TEST_CASE("booleans accept true/false, yes/no and 1/0 in any case", "[config]") {
  const auto spelling = GENERATE(as<std::pair<std::string, bool>>{}, std::pair<std::string, bool>{"true", true},
                                 std::pair<std::string, bool>{"True", true}, std::pair<std::string, bool>{"YES", true},
                                 std::pair<std::string, bool>{"yes", true}, std::pair<std::string, bool>{"1", true},
                                 std::pair<std::string, bool>{"false", false}, std::pair<std::string, bool>{"FALSE", false},
                                 std::pair<std::string, bool>{"No", false}, std::pair<std::string, bool>{"0", false});
  INFO(spelling.first);
  // A key whose default is the opposite value, so that a reader that ignored the value fails.
  // (Named strings, not temporaries inside ?:, which GCC 12 reports as maybe uninitialized.)
  const std::string key = spelling.second ? "run.quiet" : "model.bias";
  const std::string yaml = spelling.second ? "run:\n  quiet: " + spelling.first + "\n"
                                           : "model:\n  bias: " + spelling.first + "\n";
  const auto pick = [&](const ExperimentConfig& c) { return spelling.second ? c.run.quiet : c.model.bias; };
  const bool from_file = pick(from_yaml(yaml).config);
  const bool from_set = pick(fp8t::config::load("", {Override{key, spelling.first, "--set"}}).config);
  REQUIRE(ExperimentConfig{}.run.quiet == false);
  REQUIRE(ExperimentConfig{}.model.bias == true);
  CHECK(from_file == spelling.second);
  CHECK(from_set == spelling.second);
}

TEST_CASE("per-GEMM flags accept a mapping, a list or comma text", "[config]") {
  using fp8t::config::load;
  const ExperimentConfig defaults;
  // A partial mapping keeps the other GEMMs at their defaults (fast_accumulation: fprop on).
  const auto partial = from_yaml("fp8:\n  fast_accumulation: {wgrad: true}\n").config.fp8.fast_accumulation;
  CHECK(partial.fprop == defaults.fp8.fast_accumulation.fprop);
  CHECK_FALSE(partial.dgrad);
  CHECK(partial.wgrad);

  const auto list = from_yaml("fp8:\n  override_linear_precision: [0, 1, 0]\n").config.fp8.override_linear_precision;
  CHECK_FALSE(list.fprop);
  CHECK(list.dgrad);
  CHECK_FALSE(list.wgrad);

  const auto text = load("", {Override{"fp8.override_linear_precision", "false,false,true", "--set"}})
                        .config.fp8.override_linear_precision;
  CHECK_FALSE(text.fprop);
  CHECK_FALSE(text.dgrad);
  CHECK(text.wgrad);

  const auto flow = load("", {Override{"fp8.override_linear_precision", "{dgrad: yes}", "--set"}})
                        .config.fp8.override_linear_precision;
  CHECK_FALSE(flow.fprop);
  CHECK(flow.dgrad);
  CHECK_FALSE(flow.wgrad);

  const auto scalar = from_yaml("fp8:\n  fast_accumulation: 1, 1, 1\n").config.fp8.fast_accumulation;
  CHECK((scalar.fprop && scalar.dgrad && scalar.wgrad));
}

TEST_CASE("skip_layers accepts a list or comma text", "[config]") {
  using fp8t::config::load;
  using Names = std::vector<std::string>;
  CHECK(from_yaml("fp8:\n  skip_layers: []\n").config.fp8.skip_layers.empty());
  CHECK(from_yaml("fp8:\n  skip_layers:\n").config.fp8.skip_layers.empty());
  CHECK(from_yaml("fp8:\n  skip_layers:\n    - lm_head\n    - wte\n").config.fp8.skip_layers == Names{"lm_head", "wte"});
  CHECK(load("", {Override{"fp8.skip_layers", "lm_head, blocks.1.mlp.fc", "--set"}}).config.fp8.skip_layers ==
        Names{"lm_head", "blocks.1.mlp.fc"});
  CHECK(load("", {Override{"fp8.skip_layers", "", "--set"}}).config.fp8.skip_layers.empty());
  CHECK(load("", {Override{"fp8.skip_layers", "[a, b]", "--set"}}).config.fp8.skip_layers == Names{"a", "b"});
}

TEST_CASE("numbers: signs, exponents and the full uint64 seed range", "[config]") {
  const ExperimentConfig c = from_yaml(
                                 "run:\n  seed: +0\ntrain:\n  lr: +1E-3\n  min_lr: 0\n  steps: +40\n"
                                 "  grad_clip: 2\nfp8:\n  margin: 0\n")
                                 .config;
  CHECK(c.run.seed == 0);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.min_lr == 0.0);
  CHECK(c.train.steps == 40);
  CHECK(c.train.grad_clip == 2.0);
  CHECK(fp8t::config::load("", {Override{"run.seed", "18446744073709551615", "--seed"}}).config.run.seed ==
        UINT64_MAX);
}

TEST_CASE("to_yaml prints every key and reads back to an equal config", "[config]") {
  const ExperimentConfig defaults;
  const std::string text = fp8t::config::to_yaml(defaults);
  for (const auto& f : fields()) {
    INFO(f.key);
    CHECK_THAT(text, FP8T_CONTAINS(f.name() + ": "));
  }
  const LoadedConfig again = from_yaml(text);
  CHECK(again.config == defaults);
  CHECK(again.sources.all().size() == fields().size());

  // A config with every key changed, including strings that need quoting.
  LoadedConfig full = from_yaml(kFullFile);
  full.config.run.name = "yes";
  full.config.run.out_dir = "runs dir/with \"quotes\" and: colon #hash";
  full.config.data.val_path = {"null"};
  full.config.data.train_path = {"~", "a,b.bin"};
  full.config.fp8.skip_layers = {"1.5", "", "a,b"};  // not valid to validate(), fine for printing
  LoadedConfig back;
  fp8t::config::apply_yaml(fp8t::config::to_yaml(full.config), "printed.yaml", back);
  CHECK(back.config == full.config);
  CHECK(back.config.fp8.skip_layers == full.config.fp8.skip_layers);
  CHECK(back.config.run.out_dir == full.config.run.out_dir);

  // Floats keep every bit.
  LoadedConfig odd;
  odd.config.train.lr = 0.1 + 0.2;
  odd.config.model.norm_eps = 1.0 / 3.0;
  odd.config.train.eps = 5e-324;
  LoadedConfig odd_back;
  fp8t::config::apply_yaml(fp8t::config::to_yaml(odd.config), "printed.yaml", odd_back);
  CHECK(odd_back.config.train.lr == 0.1 + 0.2);
  CHECK(odd_back.config.model.norm_eps == 1.0 / 3.0);
  CHECK(odd_back.config.train.eps == 5e-324);
}

TEST_CASE("precedence: defaults < YAML < overrides, later overrides win", "[config]") {
  using fp8t::config::load_from_string;
  const std::string yaml = "train:\n  steps: 100\n  warmup_steps: 10\nfp8:\n  margin: 1\n";

  const LoadedConfig file_only = load_from_string(yaml, "x.yaml", {});
  CHECK(file_only.config.train.steps == 100);
  CHECK(file_only.config.train.lr == ExperimentConfig{}.train.lr);  // untouched: default
  CHECK(file_only.sources.origin("train.steps") == "x.yaml:2");
  CHECK(file_only.sources.origin("train.lr") == "default");

  const LoadedConfig set_over_file = load_from_string(yaml, "x.yaml", {Override{"train.steps", "200", "--set"}});
  CHECK(set_over_file.config.train.steps == 200);
  CHECK(set_over_file.sources.origin("train.steps") == "--set");

  // A dedicated flag after --set wins ...
  const LoadedConfig flag_last = load_from_string(
      yaml, "x.yaml", {Override{"train.steps", "200", "--set"}, Override{"train.steps", "300", "--steps"}});
  CHECK(flag_last.config.train.steps == 300);
  CHECK(flag_last.sources.origin("train.steps") == "--steps");

  // ... and --set after a dedicated flag wins too: command-line order decides.
  const LoadedConfig set_last = load_from_string(
      yaml, "x.yaml", {Override{"train.steps", "300", "--steps"}, Override{"train.steps", "200", "--set"}});
  CHECK(set_last.config.train.steps == 200);
  CHECK(set_last.sources.origin("train.steps") == "--set");

  // Overrides of other keys leave the file's values alone.
  const LoadedConfig other = load_from_string(yaml, "x.yaml", {Override{"fp8.margin", "3", "--fp8-margin"}});
  CHECK(other.config.fp8.margin == 3);
  CHECK(other.config.train.steps == 100);
  CHECK(other.sources.origin("fp8.margin") == "--fp8-margin");

  // An empty origin reads as --set.
  CHECK(load_from_string("", "x.yaml", {Override{"train.steps", "50", ""}}).sources.origin("train.steps") == "--set");
}

TEST_CASE("validation runs on the combined result, not on each source", "[config]") {
  // The file alone would fail (warmup 500 > steps 300); the override fixes it.
  const LoadedConfig ok = from_yaml("train:\n  warmup_steps: 500\n", {Override{"train.steps", "1000", "--steps"}});
  CHECK(ok.config.train.warmup_steps == 500);
  CHECK(ok.config.train.steps == 1000);
}
