// Recipe keys and fp8.recipe (lib/config/validate.cpp, lib/config/fp8_recipe_fields.*, print.cpp's
// recipe_note): a key without effect under the chosen recipe is an exit-2 error when it was set
// explicitly, and ignored otherwise.
#include "tests/config/config_test_util.h"

#include "lib/config/fp8_recipe_fields.h"  // recipe_field_applies, recipe_summary

using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::bad_yaml_message;
using fp8t::config::testing::from_yaml;
using fp8t::config::testing::parse_flags;
namespace fp8 = fp8t::fp8;

TEST_CASE("recipe keys: which take effect under which recipe", "[config]") {
  using fp8::RecipeKind;
  CHECK(fp8::recipe_field_applies(RecipeKind::kDelayed, "fp8.amax_history_len"));
  CHECK_FALSE(fp8::recipe_field_applies(RecipeKind::kCurrent, "fp8.amax_history_len"));
  CHECK_FALSE(fp8::recipe_field_applies(RecipeKind::kCurrent, "fp8.reduce_amax"));
  CHECK(fp8::recipe_field_applies(RecipeKind::kCurrent, "fp8.margin"));
  CHECK(fp8::recipe_field_applies(RecipeKind::kCurrent, "fp8.fp8_format"));
  CHECK_FALSE(fp8::recipe_field_applies(RecipeKind::kBlock, "fp8.fp8_format"));
  CHECK_FALSE(fp8::recipe_field_applies(RecipeKind::kBlock, "fp8.fast_accumulation"));
  CHECK(fp8::recipe_field_applies(RecipeKind::kBlock, "fp8.block_power_of_2_scales"));
  CHECK_FALSE(fp8::recipe_field_applies(RecipeKind::kDelayed, "fp8.block_power_of_2_scales"));
  CHECK(fp8::recipe_field_applies(RecipeKind::kDelayed, "fp8.swiglu_wgrad_copy"));
  CHECK(fp8::recipe_field_applies(RecipeKind::kCurrent, "fp8.swiglu_wgrad_copy"));
  CHECK_FALSE(fp8::recipe_field_applies(RecipeKind::kBlock, "fp8.swiglu_wgrad_copy"));
  for (const RecipeKind k : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock}) {
    CHECK(fp8::recipe_field_applies(k, "fp8.stats"));  // not recipe-specific
    CHECK(fp8::recipe_field_applies(k, "fp8.override_linear_precision"));
  }
  fp8::Recipe r;
  r.kind = RecipeKind::kCurrent;
  CHECK_THAT(fp8::recipe_summary(r), FP8T_CONTAINS("without effect: fp8.interval, fp8.amax_history_len"));
}

TEST_CASE("recipe keys: a key without effect given by a flag is exit 2 naming the key and the recipe", "[config]") {
  const std::string msg = bad_input_message([] {
    fp8t::config::load("", parse_flags({"--precision", "fp8", "--fp8-recipe", "current", "--fp8-amax-history-len", "16"}));
  });
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.amax_history_len (--fp8-amax-history-len) = 16 has no effect under fp8.recipe"));
  CHECK_THAT(msg, FP8T_CONTAINS("= current"));
  // Also at the default value: a flag is a deliberate request.
  bad_input_message([] {
    fp8t::config::load("", parse_flags({"--precision", "fp8", "--fp8-recipe", "block", "--fp8-format", "HYBRID"}));
  });
  bad_input_message([] {
    fp8t::config::load("", parse_flags({"--precision", "fp8", "--set", "fp8.block_power_of_2_scales=false"}));
  });
  const std::string swiglu = bad_input_message([] {
    fp8t::config::load("", parse_flags({"--precision", "fp8", "--fp8-recipe", "block", "--fp8-swiglu-wgrad-copy",
                                        "forward"}));
  });
  CHECK_THAT(swiglu, FP8T_CONTAINS("fp8.swiglu_wgrad_copy (--fp8-swiglu-wgrad-copy) = forward has no effect"));
  CHECK_THAT(swiglu, FP8T_CONTAINS("always casts c_proj's wgrad copy in the forward"));
  const auto forward = fp8t::config::load("", parse_flags({"--precision", "fp8", "--fp8-swiglu-wgrad-copy", "forward"}));
  CHECK(forward.config.fp8.swiglu_wgrad_copy == fp8::SwigluWgradCopy::kForward);
}

TEST_CASE("recipe keys: in a file, a value other than the default is exit 2 with its line; the default is ignored",
          "[config]") {
  const std::string msg = bad_yaml_message("precision: fp8\nfp8:\n  recipe: current\n  interval: 4\n");
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.interval (test.yaml:4)"));
  CHECK_THAT(msg, FP8T_CONTAINS("no amax history"));
  // Every shipped config spells out every key at its default: switching the recipe must work.
  const std::string spelled_out = fp8t::config::to_yaml(fp8t::ExperimentConfig{});
  const auto loaded = from_yaml(spelled_out, parse_flags({"--precision", "fp8", "--fp8-recipe", "current"}));
  CHECK(loaded.config.fp8.kind == fp8::RecipeKind::kCurrent);
  const std::string note = fp8t::config::recipe_note(loaded.config);
  CHECK_THAT(note, FP8T_CONTAINS("# fp8.recipe current: recipe keys in effect: fp8.margin"));
  CHECK_THAT(note, FP8T_CONTAINS("# ignored under current: fp8.interval"));
}

TEST_CASE("recipe keys: under another precision the fp8 keys are not checked", "[config]") {
  // A sweep varies the precision with the same flags: only a warning (warn_unused_fp8_flags).
  const auto loaded = fp8t::config::load(
      "", parse_flags({"--precision", "bf16", "--fp8-recipe", "current", "--fp8-amax-history-len", "16"}));
  CHECK(loaded.config.fp8.amax_history_len == 16);
  CHECK(fp8t::config::recipe_note(loaded.config).empty());
}
