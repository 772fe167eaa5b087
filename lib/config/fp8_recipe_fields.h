// The config-level registry of the FP8 scaling recipes: one RecipeTraits per recipe (its
// fp8.recipe name, which fp8.* keys take effect under it and why the others do not, its plan
// line, and the facts the trainer, the ZeRO-3 rules and the precision chart ask of it). The
// config validation refuses a key without effect when it was set explicitly, and --print-config,
// --dry-run and the rewrite report say which keys apply (docs/fp8.md, "Recipes"). The state
// classes that run a recipe are lib/fp8/recipes/ (registry.cpp); lib/fp8/recipes/README.md says
// what a new recipe adds. No LibTorch, no YAML.
#pragma once

#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

#include "lib/config/fp8_recipe.h"  // Recipe, RecipeKind

namespace fp8t {
namespace fp8 {

// Which of the recipe's FP8 scales every data-parallel rank holds identically.
enum class RanksShareScales {
  kNone,     // none per tensor (block scales are per block and come with each cast)
  kWeights,  // the weights' (the weights agree after the all-reduced step; each rank's own activations)
  kAll,      // all (their amaxes are MAX-reduced across the ranks, fp8.reduce_amax)
};

// A recipe's config-level description: what the config, the logs, the precision chart and the
// rules of the parallel layouts ask of a recipe without naming it. One entry per recipe in the
// table of fp8_recipe_fields.cpp.
struct RecipeTraits {
  RecipeKind kind;
  const char* name;          // the fp8.recipe value (fp8_recipe.h kRecipeKindNames), also in logs
  const char* what_it_does;  // recipe_summary's clause
  // The recipe-specific keys (the table of fp8_recipe_fields.cpp) that take effect under it.
  std::vector<std::string_view> keys_in_effect;
  // Why a recipe-specific key has no effect under it, where the key's own reason does not say it
  // (one clause each); other keys: "the <name> recipe has no amax history and no scale update".
  std::vector<std::pair<std::string_view, const char*>> why_no_effect;
  // The plan line's settings of the recipe ("format HYBRID, margin 0, ").
  std::string (*settings_line)(const Recipe& recipe);
  bool per_tensor_scales;  // one scale per tensor (the chart's "per-tensor", the final scale range)
  const char* gathered_weight_scales;  // the scales of a ZeRO-3 gathered FP8 weight, for the chart
  RanksShareScales ranks_share;
  // Its scales come from amaxes every rank records, which agree across the ranks only while
  // fp8.reduce_amax MAX-reduces them (the chart's collective, the scale spread's expectation, and
  // ZeRO-3, whose ranks cast parts of one weight with one scale, needs it true).
  bool rank_amaxes;
  // Its scales are state calibrated over the steps and kept in checkpoints (an evaluation of
  // weights without that state warns).
  bool calibrated_state;
  // Its scales fit the grouped FP8 GEMM of a mixture of experts' experts (one scale per tensor or
  // per row: lib/fp8/layers/fp8_grouped_linear.h); without, the experts stay in high precision.
  bool grouped_gemm;
};

// Every recipe of this build, in fp8.recipe's documented order.
const std::vector<RecipeTraits>& recipe_registry();
// The recipe of `kind` (every RecipeKind has one; fp8t::Error otherwise).
const RecipeTraits& recipe_traits(RecipeKind kind);
// The recipe named `name` (an fp8.recipe value); an unknown name is exit 2 naming fp8.recipe and
// the names this build knows.
const RecipeTraits& recipe_named(std::string_view name);
// "delayed, current, rowwise": the recipes whose experts run in FP8 (RecipeTraits::grouped_gemm).
std::string recipes_with_grouped_gemm();
// "delayed, current, block, rowwise": the names, for messages.
std::string recipe_names();
// "delayed: per-tensor scales from ...; current: ...": every name with what it does, for help
// texts (every list of the recipes comes from the registry).
std::string recipe_choices();

// Whether the config key (full name, "fp8.amax_history_len") takes effect under `kind`. Keys
// outside the recipe-specific set (fp8.recipe, fp8.stats, fp8.skip_layers, ...) always do.
bool recipe_field_applies(RecipeKind kind, std::string_view key);

// The recipe-specific keys that take effect under `kind`, and those that do not, in table order.
std::vector<std::string> recipe_fields_in_effect(RecipeKind kind);
std::vector<std::string> recipe_fields_without_effect(RecipeKind kind);

// Why a key has no effect under `kind` (one clause, for error messages and the config print).
std::string why_no_effect(RecipeKind kind, std::string_view key);

// One line for logs and reports: the recipe, what it does, and the keys without effect under it.
std::string recipe_summary(const Recipe& recipe);

}  // namespace fp8
}  // namespace fp8t
