// The config-level recipe registry (lib/config/fp8_recipe_fields.*): every fp8.recipe name maps to
// its recipe and back, an unknown name is refused naming fp8.recipe, and the traits that replaced
// the switches on RecipeKind in lib/train, lib/dist and lib/config answer as those switches did
// (the expected values below are the switches' answers, copied from the code they replaced).
#include "tests/config/config_test_util.h"

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/config/fp8_recipe_fields.h"  // recipe_registry, recipe_named, recipe_traits
#include "lib/config/print.h"              // to_yaml

using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::bad_yaml_message;
namespace fp8 = fp8t::fp8;
using fp8::RecipeKind;

namespace {

const std::vector<RecipeKind> kShipped = {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock};

// why_no_effect as lib/config/fp8_recipe_fields.cpp answered it before the registry.
std::string old_why_no_effect(RecipeKind kind, const std::string& k) {
  if (k == "fp8.block_power_of_2_scales") return "only the block recipe has block scales";
  if (kind == RecipeKind::kBlock && k == "fp8.fp8_format") return "the block recipe casts every tensor to E4M3";
  if (kind == RecipeKind::kBlock && k == "fp8.fast_accumulation") {
    return "the block-scaled GEMMs always use split accumulation";
  }
  if (kind == RecipeKind::kBlock && k == "fp8.margin") return "block scales map each block's amax onto fp8_max";
  if (kind == RecipeKind::kBlock && k == "fp8.swiglu_wgrad_copy") {
    return "the block recipe always casts c_proj's wgrad copy in the forward (its blocks' scales come from the value)";
  }
  return std::string("the ") + fp8::to_string(kind) + " recipe has no amax history and no scale update";
}

}  // namespace

TEST_CASE("recipe registry: every fp8.recipe name maps to its recipe and back", "[config]") {
  REQUIRE(fp8::recipe_registry().size() == fp8::kRecipeKindNames.size());
  for (const auto& [kind, name] : fp8::kRecipeKindNames) {
    INFO("fp8.recipe " << name);
    CHECK(fp8::recipe_named(name).kind == kind);
    CHECK(std::string(fp8::recipe_traits(kind).name) == name);
    CHECK(&fp8::recipe_named(name) == &fp8::recipe_traits(kind));
  }
  CHECK(fp8::recipe_names() == "delayed, current, block, rowwise");
}

TEST_CASE("recipe registry: an unknown recipe name is refused naming fp8.recipe", "[config]") {
  const std::string msg = bad_input_message([] { fp8::recipe_named("mxfp8"); });
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.recipe"));
  CHECK_THAT(msg, FP8T_CONTAINS("'mxfp8'"));
  CHECK_THAT(msg, FP8T_CONTAINS("delayed, current, block, rowwise"));
  CHECK_THAT(bad_input_message([] { fp8::recipe_named(""); }), FP8T_CONTAINS("fp8.recipe"));
  // The experiment file: the same refusal through the loader, naming the key.
  std::string yaml = fp8t::config::to_yaml(fp8t::ExperimentConfig{});
  const size_t at = yaml.find("recipe: delayed");
  REQUIRE(at != std::string::npos);
  yaml.replace(at, std::string("recipe: delayed").size(), "recipe: mxfp8");
  const std::string loaded = bad_yaml_message(yaml);
  CHECK_THAT(loaded, FP8T_CONTAINS("fp8.recipe"));
  CHECK_THAT(loaded, FP8T_CONTAINS("mxfp8"));
}

TEST_CASE("recipe registry: the plan line's settings are the old switch's", "[config]") {
  fp8::Recipe r;
  r.margin = 2;
  r.interval = 3;
  r.amax_history_len = 16;
  r.amax_compute_algo = fp8::AmaxComputeAlgo::kMostRecent;
  r.fp8_format = fp8::RecipeFormat::kE4M3;
  CHECK(fp8::recipe_traits(RecipeKind::kDelayed).settings_line(r) ==
        "format E4M3, margin 2, interval 3, amax history 16 (most_recent), ");
  CHECK(fp8::recipe_traits(RecipeKind::kCurrent).settings_line(r) == "format E4M3, margin 2, ");
  CHECK(fp8::recipe_traits(RecipeKind::kBlock).settings_line(r) == "E4M3, power-of-2 block scales, ");
  r.block_power_of_2_scales = false;
  CHECK(fp8::recipe_traits(RecipeKind::kBlock).settings_line(r) == "E4M3, FP32 block scales, ");
}

TEST_CASE("recipe registry: the traits answer as the switches on RecipeKind did", "[config]") {
  const auto& delayed = fp8::recipe_traits(RecipeKind::kDelayed);
  const auto& current = fp8::recipe_traits(RecipeKind::kCurrent);
  const auto& block = fp8::recipe_traits(RecipeKind::kBlock);
  // progress.cpp's scale range and the chart's "per-tensor": every recipe but block.
  CHECK(delayed.per_tensor_scales);
  CHECK(current.per_tensor_scales);
  CHECK_FALSE(block.per_tensor_scales);
  // The chart's ZeRO-3 gather row.
  CHECK(std::string(delayed.gathered_weight_scales) == "per-tensor");
  CHECK(std::string(current.gathered_weight_scales) == "per-tensor");
  CHECK(std::string(block.gathered_weight_scales) == "128x128 block");
  // training_loop.cpp's scales every rank shares: delayed all, current the weights', block none.
  CHECK(delayed.ranks_share == fp8::RanksShareScales::kAll);
  CHECK(current.ranks_share == fp8::RanksShareScales::kWeights);
  CHECK(block.ranks_share == fp8::RanksShareScales::kNone);
  // Amaxes reduced across ranks (the chart, the scale spread, the ZeRO-3 rule) and calibrated
  // state (eval's warning): delayed only.
  CHECK(delayed.rank_amaxes);
  CHECK_FALSE(current.rank_amaxes);
  CHECK_FALSE(block.rank_amaxes);
  CHECK(delayed.calibrated_state);
  CHECK_FALSE(current.calibrated_state);
  CHECK_FALSE(block.calibrated_state);
}

TEST_CASE("recipe registry: the rowwise recipe's entry (scales per row, nothing shared across ranks)", "[config]") {
  const auto& rowwise = fp8::recipe_traits(RecipeKind::kRowwise);
  CHECK(std::string(rowwise.name) == "rowwise");
  CHECK_FALSE(rowwise.per_tensor_scales);
  CHECK(rowwise.ranks_share == fp8::RanksShareScales::kNone);
  CHECK_FALSE(rowwise.rank_amaxes);
  CHECK_FALSE(rowwise.calibrated_state);
  CHECK(fp8::recipe_fields_in_effect(RecipeKind::kRowwise) == std::vector<std::string>{"fp8.fast_accumulation"});
  CHECK(fp8::why_no_effect(RecipeKind::kRowwise, "fp8.fp8_format") == "the rowwise recipe casts every tensor to E4M3");
  CHECK(fp8::why_no_effect(RecipeKind::kRowwise, "fp8.interval") ==
        "the rowwise recipe has no amax history and no scale update");
  fp8::Recipe r;
  CHECK(rowwise.settings_line(r) == "E4M3, power-of-2 row scales, ");
}

TEST_CASE("recipe registry: why a key has no effect, as before, for every recipe and key", "[config]") {
  int asked = 0;
  for (const RecipeKind kind : kShipped) {
    for (const std::string& key : fp8::recipe_fields_without_effect(kind)) {
      INFO(fp8::to_string(kind) << " " << key);
      CHECK(fp8::why_no_effect(kind, key) == old_why_no_effect(kind, key));
      ++asked;
    }
    for (const std::string& key : fp8::recipe_fields_in_effect(kind)) {
      CHECK(fp8::why_no_effect(kind, key) == old_why_no_effect(kind, key));
    }
  }
  CHECK(asked == 1 + 6 + 9);  // delayed: block_power_of_2_scales; current: 6; block: all but one
  fp8::Recipe r;
  r.kind = RecipeKind::kBlock;
  CHECK(fp8::recipe_summary(r) ==
        "FP8 recipe: block (E4M3 with FP32 scales per 1x128 block (activations, gradients) and 128x128 block "
        "(weights)); recipe keys in effect: fp8.block_power_of_2_scales; without effect: fp8.margin, "
        "fp8.fp8_format, fp8.fast_accumulation, fp8.interval, fp8.amax_history_len, fp8.amax_compute_algo, "
        "fp8.amax_update, fp8.reduce_amax, fp8.swiglu_wgrad_copy");
  r.kind = RecipeKind::kDelayed;
  CHECK(fp8::recipe_summary(r) ==
        "FP8 recipe: delayed (per-tensor scales from an amax history, updated after the backward); recipe keys "
        "in effect: fp8.margin, fp8.fp8_format, fp8.fast_accumulation, fp8.interval, fp8.amax_history_len, "
        "fp8.amax_compute_algo, fp8.amax_update, fp8.reduce_amax, fp8.swiglu_wgrad_copy; without effect: "
        "fp8.block_power_of_2_scales");
}

TEST_CASE("recipe registry: ZeRO-3 needs fp8.reduce_amax under a recipe whose scales come from each rank's amaxes",
          "[config]") {
  using fp8t::config::testing::parse_flags;
  const std::string msg = bad_input_message([] {
    fp8t::config::load("", parse_flags({"--precision", "fp8", "--fp8-recipe", "delayed", "--zero", "3", "--set",
                                        "fp8.reduce_amax=false"}));
  });
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.reduce_amax ("));
  CHECK_THAT(msg, FP8T_CONTAINS(") = false with dist.zero ("));
  CHECK_THAT(msg, FP8T_CONTAINS("every weight with the delayed scale, which must then be the same on every rank"));
  // ZeRO-1 keeps whole weights on every rank: unreduced delayed amaxes are allowed there.
  CHECK(fp8t::config::load("", parse_flags({"--precision", "fp8", "--zero", "1", "--set", "fp8.reduce_amax=false"}))
            .config.fp8.reduce_amax == false);
  // The recipes without rank amaxes shard their weights under ZeRO-3 (fp8.reduce_amax has no effect there).
  for (const char* name : {"current", "block"}) {
    INFO(name);
    CHECK(fp8t::config::load("", parse_flags({"--precision", "fp8", "--fp8-recipe", name, "--zero", "3"}))
              .config.fp8.kind == fp8::recipe_named(name).kind);
  }
}
