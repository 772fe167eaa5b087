// The registry of the recipes' state classes: make_scaling's table, one line per recipe. The
// recipe's config-level description (name, keys, plan and chart wording) is its entry in
// lib/config/fp8_recipe_fields.cpp; lib/fp8/recipes/README.md lists what a new recipe adds.
#include <array>  // std::array

#include "lib/fp8/recipes/block_scaling.h"    // BlockScaling
#include "lib/fp8/recipes/current_scaling.h"  // CurrentScaling
#include "lib/fp8/recipes/delayed_scaling.h"  // DelayedScaling
#include "lib/fp8/recipes/rowwise_scaling.h"  // RowwiseScaling
#include "lib/fp8/recipes/scaling.h"          // Scaling, make_scaling
#include "lib/util/error.h"                   // FP8T_THROW

namespace fp8t {
namespace fp8 {

namespace {

struct StateClass {
  RecipeKind kind;
  std::shared_ptr<Scaling> (*make)(const Recipe& recipe);
};

template <class S>
std::shared_ptr<Scaling> make(const Recipe& recipe) {
  return std::make_shared<S>(recipe);
}

constexpr std::array<StateClass, 4> kStateClasses = {{
    {RecipeKind::kDelayed, make<DelayedScaling>},
    {RecipeKind::kCurrent, make<CurrentScaling>},
    {RecipeKind::kBlock, make<BlockScaling>},
    {RecipeKind::kRowwise, make<RowwiseScaling>},
}};

}  // namespace

std::shared_ptr<Scaling> make_scaling(const Recipe& recipe) {
  for (const StateClass& c : kStateClasses) {
    if (c.kind == recipe.kind) return c.make(recipe);
  }
  FP8T_THROW(ExitCode::kBadInput, "fp8.recipe ", to_string(recipe.kind), " is not available in this build");
}

}  // namespace fp8
}  // namespace fp8t
