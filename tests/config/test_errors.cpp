// Bad experiment files and overrides: each is one kBadInput error naming the key, where the value
// came from (file:line or the flag) and what was expected.
#include "tests/config/config_test_util.h"

#include "lib/config/loader.h"
#include "lib/config/validate.h"

using fp8t::config::Override;
using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::bad_yaml_message;

TEST_CASE("missing config file names the path", "[config]") {
  const std::string path = "/nonexistent-dir/fp8t/missing.yaml";
  const std::string msg = bad_input_message([&] { fp8t::config::load(path, {}); });
  CHECK_THAT(msg, FP8T_CONTAINS("not found"));
  CHECK_THAT(msg, FP8T_CONTAINS(path));
}

TEST_CASE("YAML syntax error names file and line", "[config]") {
  const std::string msg = bad_yaml_message("run:\n  name: x\nmodel:\n  n_layer: [1, 2\n  n_head: 4\n");
  CHECK_THAT(msg, FP8T_CONTAINS("YAML syntax error"));
  CHECK_THAT(msg, FP8T_CONTAINS("test.yaml:"));
  const std::string tab = bad_yaml_message("model:\n  n_layer: 2\n\t n_head: 4\n");
  CHECK_THAT(tab, FP8T_CONTAINS("test.yaml:3"));
}

TEST_CASE("top level that is not a mapping", "[config]") {
  const std::string msg = bad_yaml_message("- run\n- model\n");
  CHECK_THAT(msg, FP8T_CONTAINS("test.yaml:1"));
  CHECK_THAT(msg, FP8T_CONTAINS("top level must be a mapping"));
  CHECK_THAT(bad_yaml_message("just text\n"), FP8T_CONTAINS("top level must be a mapping"));
}

TEST_CASE("unknown section suggests the closest name", "[config]") {
  const std::string msg = bad_yaml_message("run:\n  seed: 1\nmodle:\n  n_layer: 2\n");
  CHECK_THAT(msg, FP8T_CONTAINS("test.yaml:3"));
  CHECK_THAT(msg, FP8T_CONTAINS("unknown section 'modle'"));
  CHECK_THAT(msg, FP8T_CONTAINS("did you mean model?"));
  // A key written at the top level is found by its leaf name.
  CHECK_THAT(bad_yaml_message("n_layer: 2\n"), FP8T_CONTAINS("did you mean model.n_layer?"));
}

TEST_CASE("unknown key suggests the closest key", "[config]") {
  const std::string msg = bad_yaml_message("model:\n  n_head: 4\n  nlayer: 3\n");
  CHECK_THAT(msg, FP8T_CONTAINS("test.yaml:3"));
  CHECK_THAT(msg, FP8T_CONTAINS("unknown key 'model.nlayer'"));
  CHECK_THAT(msg, FP8T_CONTAINS("did you mean model.n_layer?"));
  // A key in the wrong section points to the right one.
  const std::string moved = bad_yaml_message("train:\n  seed: 3\n");
  CHECK_THAT(moved, FP8T_CONTAINS("unknown key 'train.seed'"));
  CHECK_THAT(moved, FP8T_CONTAINS("did you mean run.seed?"));
  // Nothing close: no suggestion.
  CHECK_THAT(bad_yaml_message("train:\n  completely_unrelated_thing: 3\n"),
             !FP8T_CONTAINS("did you mean"));
}

TEST_CASE("duplicate keys are rejected", "[config]") {
  const std::string msg = bad_yaml_message("model:\n  n_layer: 2\n  n_layer: 3\n");
  CHECK_THAT(msg, FP8T_CONTAINS("duplicate key 'model.n_layer'"));
  CHECK_THAT(msg, FP8T_CONTAINS("test.yaml:3"));
}

TEST_CASE("wrong value types name key, line and expected type", "[config]") {
  struct Case {
    const char* yaml;
    const char* key_and_line;
    const char* expected;
  };
  const Case c = GENERATE(
      Case{"model:\n  n_layer: three\n", "model.n_layer (test.yaml:2)", "expected an integer"},
      Case{"train:\n  lr: [1, 2]\n", "train.lr (test.yaml:2)", "got a list"},
      Case{"train:\n  steps: {a: 1}\n", "train.steps (test.yaml:2)", "got a mapping"},
      Case{"train:\n  steps: 2.5\n", "train.steps (test.yaml:2)", "whole number"},
      Case{"train:\n  steps: 10x\n", "train.steps (test.yaml:2)", "got '10x'"},
      Case{"train:\n  steps: 0x10\n", "train.steps (test.yaml:2)", "expected an integer"},
      Case{"train:\n  steps: 1e3\n", "train.steps (test.yaml:2)", "whole number"},
      Case{"train:\n  lr: 1e-3abc\n", "train.lr (test.yaml:2)", "expected a number"},
      Case{"train:\n  lr: nan\n", "train.lr (test.yaml:2)", "expected a number"},
      Case{"train:\n  lr: inf\n", "train.lr (test.yaml:2)", "expected a number"},
      Case{"run:\n  seed: -1\n", "run.seed (test.yaml:2)", "must not be negative"},
      Case{"run:\n  quiet: maybe\n", "run.quiet (test.yaml:2)", "expected a boolean"},
      Case{"fp8:\n  margin: 99999999999\n", "fp8.margin (test.yaml:2)", "out of range"},
      Case{"model:\n  n_layer:\n", "model.n_layer (test.yaml:2)", "missing value"},
      Case{"model: 3\n", "model (test.yaml:1)", "expected a mapping"},
      Case{"run:\n  name: [a, b]\n", "run.name (test.yaml:2)", "got a list"},
      Case{"fp8:\n  skip_layers: {a: 1}\n", "fp8.skip_layers (test.yaml:2)", "got a mapping"},
      Case{"fp8:\n  override_linear_precision: [1, 0]\n", "fp8.override_linear_precision (test.yaml:2)",
           "three booleans"},
      Case{"fp8:\n  override_linear_precision:\n    fprop: true\n    xgrad: true\n",
           "fp8.override_linear_precision (test.yaml:4)", "unknown entry 'xgrad'"},
      Case{"fp8:\n  fast_accumulation:\n    fprop: sometimes\n", "fp8.fast_accumulation (test.yaml:3)",
           "fprop: expected a boolean"});
  INFO(c.yaml);
  const std::string msg = bad_yaml_message(c.yaml);
  CHECK_THAT(msg, FP8T_CONTAINS(c.key_and_line));
  CHECK_THAT(msg, FP8T_CONTAINS(c.expected));
}

TEST_CASE("bad enum value lists the allowed ones", "[config]") {
  const std::string msg = bad_yaml_message("model:\n  n_layer: 2\nprecision: fp4\n");
  CHECK_THAT(msg, FP8T_CONTAINS("precision (test.yaml:3)"));
  CHECK_THAT(msg, FP8T_CONTAINS("one of fp32, bf16, fp16, fp8"));
  CHECK_THAT(msg, FP8T_CONTAINS("'fp4'"));
  const std::string norm = bad_yaml_message("model:\n  norm: batchnorm\n");
  CHECK_THAT(norm, FP8T_CONTAINS("model.norm (test.yaml:2)"));
  CHECK_THAT(norm, FP8T_CONTAINS("one of layernorm, rmsnorm"));
}

TEST_CASE("pure E5M2 is rejected with the reason", "[config]") {
  const std::string msg = bad_yaml_message("fp8:\n  fp8_format: e5m2\n");
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.fp8_format (test.yaml:2)"));
  CHECK_THAT(msg, FP8T_CONTAINS("Transformer Engine rejects pure E5M2"));
  CHECK_THAT(msg, FP8T_CONTAINS("HYBRID uses E5M2 for the gradients"));
  CHECK_THAT(msg, FP8T_CONTAINS("one of HYBRID, E4M3"));
  const std::string flag =
      bad_input_message([] { fp8t::config::load("", {Override{"fp8.fp8_format", "E5M2", "--fp8-format"}}); });
  CHECK_THAT(flag, FP8T_CONTAINS("fp8.fp8_format (--fp8-format)"));
}

TEST_CASE("out-of-range values name key, line and the allowed range", "[config]") {
  struct Case {
    const char* section;
    const char* key;
    const char* value;
    const char* range;
  };
  const Case c = GENERATE(Case{"model", "n_layer", "0", ">= 1"}, Case{"model", "n_head", "0", ">= 1"},
                          Case{"model", "vocab_size", "0", ">= 1"}, Case{"model", "d_ff", "-1", ">= 0"},
                          Case{"model", "dropout", "1.0", "in [0, 1)"}, Case{"model", "dropout", "-0.1", "in [0, 1)"},
                          Case{"model", "norm_eps", "0", "> 0"}, Case{"train", "lr", "0", "> 0"},
                          Case{"train", "lr", "-1e-3", "> 0"}, Case{"train", "beta1", "1", "in [0, 1)"},
                          Case{"train", "beta2", "1.5", "in [0, 1)"}, Case{"train", "eps", "0", "> 0"},
                          Case{"data", "val_fraction", "0", "in (0, 1)"}, Case{"data", "val_fraction", "1", "in (0, 1)"},
                          Case{"fp8", "margin", "18", "in [-17, 17]"}, Case{"fp8", "interval", "0", ">= 1"},
                          Case{"fp8", "amax_history_len", "0", ">= 1"}, Case{"train", "grad_accum_steps", "0", ">= 1"},
                          Case{"train", "micro_batch_size", "0", ">= 1"}, Case{"train", "log_interval", "0", ">= 1"},
                          Case{"train", "steps", "0", ">= 1"}, Case{"train", "grad_clip", "-1", ">= 0"},
                          Case{"train", "warmup_steps", "-1", ">= 0"}, Case{"train", "weight_decay", "-0.5", ">= 0"});
  const std::string key = std::string(c.section) + "." + c.key;
  INFO(key << " = " << c.value);
  // Line 4: the key sits below an unrelated first section.
  const std::string msg =
      bad_yaml_message(std::string("run:\n  seed: 1\n") + c.section + ":\n  " + c.key + ": " + c.value + "\n");
  CHECK_THAT(msg, FP8T_CONTAINS(key + " (test.yaml:4)"));
  CHECK_THAT(msg, FP8T_CONTAINS(c.range));
  // The same value from a flag names the flag.
  const std::string flag_msg =
      bad_input_message([&] { fp8t::config::load("", {Override{key, c.value, "--set"}}); });
  CHECK_THAT(flag_msg, FP8T_CONTAINS(key + " (--set)"));
}

TEST_CASE("inconsistent values name both keys", "[config]") {
  SECTION("d_model not divisible by n_head") {
    const std::string msg = bad_yaml_message("model:\n  d_model: 100\n  n_head: 3\n");
    CHECK_THAT(msg, FP8T_CONTAINS("model.d_model (test.yaml:2)"));
    CHECK_THAT(msg, FP8T_CONTAINS("model.n_head (test.yaml:3)"));
    CHECK_THAT(msg, FP8T_CONTAINS("not divisible"));
  }
  SECTION("odd head dimension") {
    const std::string msg = bad_yaml_message("model:\n  d_model: 12\n  n_head: 4\n");
    CHECK_THAT(msg, FP8T_CONTAINS("model.n_head (test.yaml:3)"));
    CHECK_THAT(msg, FP8T_CONTAINS("head dimension"));
    CHECK_THAT(msg, FP8T_CONTAINS("= 3 is odd"));
  }
  SECTION("K/V heads that do not divide the query heads") {
    const std::string msg = bad_yaml_message("model:\n  n_head: 4\n  n_kv_head: 3\n");
    CHECK_THAT(msg, FP8T_CONTAINS("model.n_kv_head (test.yaml:3)"));
    CHECK_THAT(msg, FP8T_CONTAINS("does not divide model.n_head (test.yaml:2) = 4"));
  }
  SECTION("rope with an odd head dimension") {
    const std::string msg = bad_yaml_message("model:\n  position: rope\n  d_model: 12\n  n_head: 4\n");
    CHECK_THAT(msg, FP8T_CONTAINS("model.n_head (test.yaml:4)"));
    CHECK_THAT(msg, FP8T_CONTAINS("= 3 is odd"));
  }
  SECTION("an unknown position kind") {
    const std::string msg = bad_yaml_message("model:\n  position: alibi\n");
    CHECK_THAT(msg, FP8T_CONTAINS("model.position (test.yaml:2)"));
    CHECK_THAT(msg, FP8T_CONTAINS("one of learned, rope"));
  }
  SECTION("warmup longer than the run") {
    const std::string msg = bad_yaml_message("train:\n  steps: 10\n  warmup_steps: 20\n");
    CHECK_THAT(msg, FP8T_CONTAINS("train.warmup_steps (test.yaml:3)"));
    CHECK_THAT(msg, FP8T_CONTAINS("train.steps (test.yaml:2)"));
  }
  SECTION("min_lr above lr") {
    const std::string msg = bad_yaml_message("train:\n  lr: 1e-4\n  min_lr: 1e-3\n");
    CHECK_THAT(msg, FP8T_CONTAINS("train.min_lr (test.yaml:3)"));
    CHECK_THAT(msg, FP8T_CONTAINS("train.lr (test.yaml:2)"));
  }
  SECTION("text and tokens sources need a train_path") {
    const std::string text = bad_yaml_message("model:\n  vocab_size: 256\ndata:\n  source: text\n");
    CHECK_THAT(text, FP8T_CONTAINS("data.train_path (default)"));
    CHECK_THAT(text, FP8T_CONTAINS("data.source (test.yaml:4)"));
    CHECK_THAT(text, FP8T_CONTAINS("--set data.train_path=PATH"));
    const std::string tokens = bad_yaml_message("data:\n  source: tokens\n  train_path: \"\"\n");
    CHECK_THAT(tokens, FP8T_CONTAINS("data.train_path (test.yaml:3)"));
  }
  SECTION("text source needs a byte vocabulary") {
    const std::string msg = bad_yaml_message("data:\n  source: text\n  train_path: book.txt\n");
    CHECK_THAT(msg, FP8T_CONTAINS("model.vocab_size (default)"));
    CHECK_THAT(msg, FP8T_CONTAINS(">= 256"));
  }
  SECTION("periodic eval needs eval batches") {
    const std::string msg = bad_yaml_message("train:\n  eval_interval: 10\n  eval_batches: 0\n");
    CHECK_THAT(msg, FP8T_CONTAINS("train.eval_batches (test.yaml:3)"));
    CHECK_THAT(msg, FP8T_CONTAINS("train.eval_interval (test.yaml:2)"));
    // With periodic eval off, zero batches is accepted.
    CHECK(fp8t::config::testing::from_yaml("train:\n  eval_interval: 0\n  eval_batches: 0\n").config.train.eval_batches == 0);
  }
  SECTION("run name must be a folder name") {
    CHECK_THAT(bad_yaml_message("run:\n  name: a/b\n"), FP8T_CONTAINS("run.name (test.yaml:2)"));
    CHECK_THAT(bad_yaml_message("run:\n  name: \"\"\n"), FP8T_CONTAINS("run.name (test.yaml:2)"));
    CHECK_THAT(bad_yaml_message("run:\n  name: ..\n"), FP8T_CONTAINS("run.name (test.yaml:2)"));
  }
}

TEST_CASE("bad overrides name the flag", "[config]") {
  using fp8t::config::load;
  SECTION("unknown key from --set") {
    const std::string msg = bad_input_message([] { load("", {Override{"model.nlayer", "3", "--set"}}); });
    CHECK_THAT(msg, FP8T_CONTAINS("--set"));
    CHECK_THAT(msg, FP8T_CONTAINS("unknown key 'model.nlayer'"));
    CHECK_THAT(msg, FP8T_CONTAINS("did you mean model.n_layer?"));
  }
  SECTION("empty key") {
    const std::string msg = bad_input_message([] { load("", {Override{"", "3", "--set"}}); });
    CHECK_THAT(msg, FP8T_CONTAINS("--set"));
    CHECK_THAT(msg, FP8T_CONTAINS("KEY=VALUE"));
  }
  SECTION("unparsable value from a dedicated flag") {
    const std::string msg = bad_input_message([] { load("", {Override{"fp8.margin", "abc", "--fp8-margin"}}); });
    CHECK_THAT(msg, FP8T_CONTAINS("fp8.margin (--fp8-margin)"));
    CHECK_THAT(msg, FP8T_CONTAINS("expected an integer in [-17, 17]"));
  }
  SECTION("out-of-range value from a dedicated flag") {
    const std::string msg = bad_input_message([] { load("", {Override{"fp8.interval", "0", "--fp8-interval"}}); });
    CHECK_THAT(msg, FP8T_CONTAINS("fp8.interval (--fp8-interval)"));
    CHECK_THAT(msg, FP8T_CONTAINS(">= 1"));
  }
  SECTION("bad comma text for per-GEMM flags") {
    const std::string msg = bad_input_message(
        [] { load("", {Override{"fp8.override_linear_precision", "0,1", "--fp8-override-linear-precision"}}); });
    CHECK_THAT(msg, FP8T_CONTAINS("fp8.override_linear_precision (--fp8-override-linear-precision)"));
    CHECK_THAT(msg, FP8T_CONTAINS("0,0,1"));
    const std::string word = bad_input_message(
        [] { load("", {Override{"fp8.override_linear_precision", "0,1,perhaps", "--set"}}); });
    CHECK_THAT(word, FP8T_CONTAINS("wgrad: expected a boolean"));
  }
  SECTION("empty entry in a comma list") {
    const std::string msg = bad_input_message([] { load("", {Override{"fp8.skip_layers", "a,,b", "--set"}}); });
    CHECK_THAT(msg, FP8T_CONTAINS("fp8.skip_layers (--set)"));
    CHECK_THAT(msg, FP8T_CONTAINS("empty entry"));
  }
}

TEST_CASE("validate() on a config built in code", "[config]") {
  fp8t::ExperimentConfig c;
  fp8t::config::validate(c);  // the struct defaults are valid
  c.model.n_layer = 0;
  const std::string msg = bad_input_message([&] { fp8t::config::validate(c); });
  CHECK_THAT(msg, FP8T_CONTAINS("model.n_layer (default)"));
  fp8t::config::ConfigSources sources;
  sources.set("model.n_layer", "somewhere.yaml:9");
  CHECK_THAT(bad_input_message([&] { fp8t::config::validate(c, sources); }),
             FP8T_CONTAINS("model.n_layer (somewhere.yaml:9)"));
}
