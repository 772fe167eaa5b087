#include "lib/config/fp8_recipe_fields.h"

#include <algorithm>  // std::find, std::find_if
#include <array>      // std::array

#include "lib/util/error.h"  // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t {
namespace fp8 {

namespace {

// The recipe-specific keys, in the order the config print and the messages list them, and the
// reason a key has no effect under every recipe that does not list it, where the key says it.
struct RecipeKey {
  const char* key;
  const char* why_elsewhere;  // nullptr: the recipe's reason (RecipeTraits::why_no_effect)
};
constexpr std::array<RecipeKey, 10> kRecipeKeys = {{
    {"fp8.margin", nullptr},
    {"fp8.fp8_format", nullptr},
    {"fp8.fast_accumulation", nullptr},
    {"fp8.interval", nullptr},
    {"fp8.amax_history_len", nullptr},
    {"fp8.amax_compute_algo", nullptr},
    {"fp8.amax_update", nullptr},
    {"fp8.reduce_amax", nullptr},
    {"fp8.swiglu_wgrad_copy", nullptr},
    {"fp8.block_power_of_2_scales", "only the block recipe has block scales"},
}};

std::string delayed_settings(const Recipe& r) {
  return std::string("format ") + to_string(r.fp8_format) + ", margin " + std::to_string(r.margin) + ", interval " +
         std::to_string(r.interval) + ", amax history " + std::to_string(r.amax_history_len) + " (" +
         to_string(r.amax_compute_algo) + "), ";
}

std::string current_settings(const Recipe& r) {
  return std::string("format ") + to_string(r.fp8_format) + ", margin " + std::to_string(r.margin) + ", ";
}

std::string block_settings(const Recipe& r) {
  return std::string("E4M3, ") + (r.block_power_of_2_scales ? "power-of-2" : "FP32") + " block scales, ";
}

std::string rowwise_settings(const Recipe& /*r*/) { return "E4M3, power-of-2 row scales, "; }

// The registry: one entry per recipe (its state class: lib/fp8/recipes/registry.cpp).
std::vector<RecipeTraits> make_registry() {
  std::vector<RecipeTraits> r;
  r.push_back(RecipeTraits{
      RecipeKind::kDelayed, "delayed", "per-tensor scales from an amax history, updated after the backward",
      {"fp8.margin", "fp8.fp8_format", "fp8.fast_accumulation", "fp8.interval", "fp8.amax_history_len",
       "fp8.amax_compute_algo", "fp8.amax_update", "fp8.reduce_amax", "fp8.swiglu_wgrad_copy"},
      {},
      delayed_settings,
      /*per_tensor_scales=*/true, "per-tensor", RanksShareScales::kAll, /*rank_amaxes=*/true,
      /*calibrated_state=*/true, /*grouped_gemm=*/true});
  r.push_back(RecipeTraits{
      RecipeKind::kCurrent, "current", "per-tensor scales from the amax of each tensor at its cast",
      {"fp8.margin", "fp8.fp8_format", "fp8.fast_accumulation", "fp8.swiglu_wgrad_copy"},
      {},
      current_settings,
      /*per_tensor_scales=*/true, "per-tensor", RanksShareScales::kWeights, /*rank_amaxes=*/false,
      /*calibrated_state=*/false, /*grouped_gemm=*/true});
  r.push_back(RecipeTraits{
      RecipeKind::kBlock, "block",
      "E4M3 with FP32 scales per 1x128 block (activations, gradients) and 128x128 block (weights)",
      {"fp8.block_power_of_2_scales"},
      {{"fp8.fp8_format", "the block recipe casts every tensor to E4M3"},
       {"fp8.fast_accumulation", "the block-scaled GEMMs always use split accumulation"},
       {"fp8.margin", "block scales map each block's amax onto fp8_max"},
       {"fp8.swiglu_wgrad_copy",
        "the block recipe always casts c_proj's wgrad copy in the forward (its blocks' scales come from the value)"}},
      block_settings,
      /*per_tensor_scales=*/false, "128x128 block", RanksShareScales::kNone, /*rank_amaxes=*/false,
      /*calibrated_state=*/false, /*grouped_gemm=*/false});
  r.push_back(RecipeTraits{
      RecipeKind::kRowwise, "rowwise",
      "E4M3 with one power-of-2 FP32 scale per row of every GEMM operand (per token, per feature)",
      {"fp8.fast_accumulation"},
      {{"fp8.fp8_format", "the rowwise recipe casts every tensor to E4M3"},
       {"fp8.margin", "row scales map each row's amax onto fp8_max"},
       {"fp8.swiglu_wgrad_copy",
        "the rowwise recipe always casts c_proj's wgrad copy in the forward (its column scales come from the value)"}},
      rowwise_settings,
      /*per_tensor_scales=*/false, "per-row", RanksShareScales::kNone, /*rank_amaxes=*/false,
      /*calibrated_state=*/false, /*grouped_gemm=*/true});
  return r;
}

const RecipeKey* recipe_key(std::string_view key) {
  const auto it = std::find_if(kRecipeKeys.begin(), kRecipeKeys.end(), [&](const RecipeKey& k) { return key == k.key; });
  return it == kRecipeKeys.end() ? nullptr : &*it;
}

bool acts_in(const RecipeTraits& t, std::string_view key) {
  return std::find(t.keys_in_effect.begin(), t.keys_in_effect.end(), key) != t.keys_in_effect.end();
}

std::vector<std::string> fields_where(RecipeKind kind, bool in_effect) {
  const RecipeTraits& t = recipe_traits(kind);
  std::vector<std::string> out;
  for (const RecipeKey& k : kRecipeKeys) {
    if (acts_in(t, k.key) == in_effect) out.emplace_back(k.key);
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
  return s.empty() ? "none" : s;
}

}  // namespace

const std::vector<RecipeTraits>& recipe_registry() {
  static const std::vector<RecipeTraits> registry = make_registry();
  return registry;
}

const RecipeTraits& recipe_traits(RecipeKind kind) {
  for (const RecipeTraits& t : recipe_registry()) {
    if (t.kind == kind) return t;
  }
  FP8T_CHECK(false, "fp8.recipe ", to_string(kind), " has no entry in the recipe registry");
  return recipe_registry().front();
}

const RecipeTraits& recipe_named(std::string_view name) {
  for (const RecipeTraits& t : recipe_registry()) {
    if (name == t.name) return t;
  }
  FP8T_INPUT_CHECK(false, "fp8.recipe: unknown FP8 recipe '", std::string(name), "' (expected one of ", recipe_names(),
                   ")");
  return recipe_registry().front();
}

std::string recipe_names() {
  std::string s;
  for (const RecipeTraits& t : recipe_registry()) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

std::string recipes_with_grouped_gemm() {
  std::string s;
  for (const RecipeTraits& t : recipe_registry()) {
    if (t.grouped_gemm) s += (s.empty() ? "" : ", ") + std::string(t.name);
  }
  return s;
}

std::string recipe_choices() {
  std::string s;
  for (const RecipeTraits& t : recipe_registry()) s += (s.empty() ? "" : "; ") + std::string(t.name) + ": " + t.what_it_does;
  return s;
}

bool recipe_field_applies(RecipeKind kind, std::string_view key) {
  return recipe_key(key) == nullptr || acts_in(recipe_traits(kind), key);
}

std::vector<std::string> recipe_fields_in_effect(RecipeKind kind) { return fields_where(kind, true); }
std::vector<std::string> recipe_fields_without_effect(RecipeKind kind) { return fields_where(kind, false); }

std::string why_no_effect(RecipeKind kind, std::string_view key) {
  const RecipeKey* k = recipe_key(key);
  if (k != nullptr && k->why_elsewhere != nullptr) return k->why_elsewhere;
  const RecipeTraits& t = recipe_traits(kind);
  for (const auto& [recipe_key_name, why] : t.why_no_effect) {
    if (key == recipe_key_name) return why;
  }
  return std::string("the ") + t.name + " recipe has no amax history and no scale update";
}

std::string recipe_summary(const Recipe& recipe) {
  const RecipeTraits& t = recipe_traits(recipe.kind);
  return std::string("FP8 recipe: ") + t.name + " (" + t.what_it_does + "); recipe keys in effect: " +
         joined(recipe_fields_in_effect(recipe.kind)) + "; without effect: " +
         joined(recipe_fields_without_effect(recipe.kind));
}

}  // namespace fp8
}  // namespace fp8t
