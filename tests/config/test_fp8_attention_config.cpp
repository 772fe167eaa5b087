// fp8.attention (lib/config/fields.cpp, validate.cpp): the key, its flag, its print, its refusal.
#include "tests/config/config_test_util.h"

using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::from_yaml;
using fp8t::config::testing::parse_flags;

TEST_CASE("fp8.attention: default false, set by file, by --fp8-attention, and printed", "[config]") {
  CHECK_FALSE(from_yaml("precision: fp8\n").config.fp8.attention);
  CHECK(from_yaml("precision: fp8\nfp8:\n  attention: true\n").config.fp8.attention);
  const fp8t::ExperimentConfig c = from_yaml("precision: fp8\n", parse_flags({"--fp8-attention"})).config;
  CHECK(c.fp8.attention);
  CHECK_THAT(fp8t::config::to_yaml(c), FP8T_CONTAINS("attention: true"));
  CHECK_THAT(fp8t::config::to_yaml(from_yaml("precision: fp8\n").config), FP8T_CONTAINS("attention: false"));
}

TEST_CASE("fp8.attention with model.dropout > 0 is refused, naming both keys", "[config]") {
  const std::string msg = bad_input_message(
      [] { from_yaml("precision: fp8\nmodel:\n  dropout: 0.1\nfp8:\n  attention: true\n"); });
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.attention (test.yaml:5) = true"));
  CHECK_THAT(msg, FP8T_CONTAINS("model.dropout (test.yaml:3) = 0.1"));
  CHECK_THAT(msg, FP8T_CONTAINS("no attention dropout"));
  // From the flag: the flag is named.
  const std::string flag = bad_input_message(
      [] { from_yaml("precision: fp8\nmodel:\n  dropout: 0.1\n", parse_flags({"--fp8-attention"})); });
  CHECK_THAT(flag, FP8T_CONTAINS("--fp8-attention"));
  // Without dropout, or under another precision (the key then has no effect), it loads.
  CHECK(from_yaml("precision: fp8\nfp8:\n  attention: true\n").config.model.dropout == 0.0);
  CHECK(from_yaml("precision: bf16\nmodel:\n  dropout: 0.1\nfp8:\n  attention: true\n").config.fp8.attention);
}
