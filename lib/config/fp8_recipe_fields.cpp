#include "lib/config/fp8_recipe_fields.h"

#include <array>  // std::array

namespace fp8t {
namespace fp8 {

namespace {

// The recipe-specific keys and the recipes they act in.
struct FieldUse {
  const char* key;
  bool delayed, current, block;
};
constexpr std::array<FieldUse, 10> kFieldUse = {{
    {"fp8.margin", true, true, false},
    {"fp8.fp8_format", true, true, false},
    {"fp8.fast_accumulation", true, true, false},
    {"fp8.interval", true, false, false},
    {"fp8.amax_history_len", true, false, false},
    {"fp8.amax_compute_algo", true, false, false},
    {"fp8.amax_update", true, false, false},
    {"fp8.reduce_amax", true, false, false},
    {"fp8.swiglu_wgrad_copy", true, true, false},
    {"fp8.block_power_of_2_scales", false, false, true},
}};

bool acts_in(const FieldUse& f, RecipeKind kind) {
  switch (kind) {
    case RecipeKind::kDelayed: return f.delayed;
    case RecipeKind::kCurrent: return f.current;
    case RecipeKind::kBlock: return f.block;
  }
  return false;
}

const char* what_it_does(RecipeKind kind) {
  switch (kind) {
    case RecipeKind::kDelayed: return "per-tensor scales from an amax history, updated after the backward";
    case RecipeKind::kCurrent: return "per-tensor scales from the amax of each tensor at its cast";
    case RecipeKind::kBlock: return "E4M3 with FP32 scales per 1x128 block (activations, gradients) and 128x128 block (weights)";
  }
  return "";
}

std::vector<std::string> fields_where(RecipeKind kind, bool in_effect) {
  std::vector<std::string> out;
  for (const FieldUse& f : kFieldUse) {
    if (acts_in(f, kind) == in_effect) out.emplace_back(f.key);
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
  return s.empty() ? "none" : s;
}

}  // namespace

bool recipe_field_applies(RecipeKind kind, std::string_view key) {
  for (const FieldUse& f : kFieldUse) {
    if (key == f.key) return acts_in(f, kind);
  }
  return true;
}

std::vector<std::string> recipe_fields_in_effect(RecipeKind kind) { return fields_where(kind, true); }
std::vector<std::string> recipe_fields_without_effect(RecipeKind kind) { return fields_where(kind, false); }

std::string why_no_effect(RecipeKind kind, std::string_view key) {
  const std::string k(key);
  if (k == "fp8.block_power_of_2_scales") return "only the block recipe has block scales";
  if (kind == RecipeKind::kBlock && k == "fp8.fp8_format") return "the block recipe casts every tensor to E4M3";
  if (kind == RecipeKind::kBlock && k == "fp8.fast_accumulation") {
    return "the block-scaled GEMMs always use split accumulation";
  }
  if (kind == RecipeKind::kBlock && k == "fp8.margin") return "block scales map each block's amax onto fp8_max";
  if (kind == RecipeKind::kBlock && k == "fp8.swiglu_wgrad_copy") {
    return "the block recipe always casts c_proj's wgrad copy in the forward (its blocks' scales come from the value)";
  }
  return std::string("the ") + to_string(kind) + " recipe has no amax history and no scale update";
}

std::string recipe_summary(const Recipe& recipe) {
  return std::string("FP8 recipe: ") + to_string(recipe.kind) + " (" + what_it_does(recipe.kind) +
         "); recipe keys in effect: " + joined(recipe_fields_in_effect(recipe.kind)) +
         "; without effect: " + joined(recipe_fields_without_effect(recipe.kind));
}

}  // namespace fp8
}  // namespace fp8t
