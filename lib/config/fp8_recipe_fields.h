// Which fp8.* keys take effect under which scaling recipe (docs/fp8.md, "Recipes"). The config
// validation refuses a key without effect when it was set explicitly, and --print-config,
// --dry-run and the rewrite report say which keys apply. No LibTorch, no YAML.
#pragma once

#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include "lib/config/fp8_recipe.h"  // Recipe, RecipeKind

namespace fp8t {
namespace fp8 {

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
