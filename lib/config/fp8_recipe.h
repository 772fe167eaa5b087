// The FP8 recipe: plain settings, no YAML and no LibTorch. config/ fills it in, fp8/ reads it;
// it lives in config so that the schema needs nothing of lib/fp8/ (docs/architecture.md).
// Field meanings: docs/fp8.md (what runs) and docs/fp8-formats.md (delayed scaling).
#pragma once

#include <array>    // std::array
#include <cstddef>  // size_t
#include <cstdint>  // int64_t
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/numerics/format.h"  // Format

namespace fp8t {
namespace fp8 {

// HYBRID: forward tensors (activations, weights) E4M3, gradients E5M2. E4M3: every tensor E4M3.
enum class RecipeFormat { kHybrid, kE4M3 };
enum class AmaxComputeAlgo { kMax, kMostRecent };
// Where a SwiGLU MLP's c_proj gets the FP8 wgrad copy of its input (the activation's columnwise
// codes), under the per-tensor recipes: written in the backward by c_fc's gradient cast, which
// reads gate and up anyway (Fp8Activation::value_copy_from_gradient_cast), or cast in the forward
// beside the rowwise copy and kept until the backward (1 byte per hidden element and token more
// per layer, the value not evaluated again in the backward kernel). The same codes either way.
enum class SwigluWgradCopy { kBackward, kForward };
// When the scales are updated: once per optimizer step (amax = max over its micro-batches), or
// after every micro-batch's backward as TransformerEngine does.
enum class AmaxUpdate { kStep, kMicrobatch };
// Which scaling recipe produces the FP8 operands (docs/fp8.md has a section per recipe):
// delayed: per-tensor scales from an amax history (the default); current: per-tensor scales from
// the amax of the tensor being cast; block: 1x128 (activations, gradients) and 128x128 (weights)
// FP32 block scales, E4M3 everywhere; rowwise: one FP32 scale per row of every GEMM operand
// (per token of activations and gradients, per feature of weights), E4M3 everywhere.
enum class RecipeKind { kDelayed, kCurrent, kBlock, kRowwise };

// Which GEMMs of every FP8 Linear run in high precision instead of FP8.
struct LinearPrecisionOverride {
  bool fprop = false;
  bool dgrad = false;
  bool wgrad = false;
};

// Fast (non-promoting) accumulation per GEMM on the GPU; TE defaults (fprop on, dgrad/wgrad off).
struct FastAccumulation {
  bool fprop = true;
  bool dgrad = false;
  bool wgrad = false;
};

struct Recipe {
  RecipeKind kind = RecipeKind::kDelayed;
  bool block_power_of_2_scales = true;  // block: round every block scale down to a power of 2
  int margin = 0;              // scale = fp8_max / amax / 2^margin
  int interval = 1;            // recompute scales every `interval` updates (history rolls every update)
  RecipeFormat fp8_format = RecipeFormat::kHybrid;
  int amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;
  AmaxUpdate amax_update = AmaxUpdate::kStep;
  SwigluWgradCopy swiglu_wgrad_copy = SwigluWgradCopy::kBackward;
  bool reduce_amax = true;     // data-parallel: MAX-reduce the amaxes across ranks before each update
  LinearPrecisionOverride override_linear_precision;
  FastAccumulation fast_accumulation;
  // Rewrite pass: module names (exact, or a suffix after '.') that stay in high precision.
  std::vector<std::string> skip_layers = {"lm_head"};
  // Rewrite pass: Linear layers whose forward GEMM per token (in_features * out_features)
  // is below this stay in high precision; 0 converts everything eligible.
  int64_t min_features_product = 0;
  // Per-layer FP8 health statistics (saturation and underflow fractions) on log steps.
  bool stats = false;
  // Attention in FP8 (Q, K, V, O, dO, P, dP; lib/fp8/layers/fp8_attention.h): cuDNN's fused FP8
  // attention on the GPU, its emulation on the CPU. false: attention in the compute dtype.
  bool attention = false;

  Format forward_format() const { return Format::kE4M3; }
  Format backward_format() const { return fp8_format == RecipeFormat::kHybrid ? Format::kE5M2 : Format::kE4M3; }
};

// The spellings of the recipe enums, declared once: the experiment file's values (the config
// field table, lib/config/fields.cpp, accepts exactly these) and the names in logs.
template <class E, size_t N>
using EnumSpellings = std::array<std::pair<E, const char*>, N>;
inline constexpr EnumSpellings<RecipeFormat, 2> kRecipeFormatNames = {
    {{RecipeFormat::kHybrid, "HYBRID"}, {RecipeFormat::kE4M3, "E4M3"}}};
inline constexpr EnumSpellings<AmaxComputeAlgo, 2> kAmaxComputeAlgoNames = {
    {{AmaxComputeAlgo::kMax, "max"}, {AmaxComputeAlgo::kMostRecent, "most_recent"}}};
inline constexpr EnumSpellings<RecipeKind, 4> kRecipeKindNames = {{{RecipeKind::kDelayed, "delayed"},
                                                                   {RecipeKind::kCurrent, "current"},
                                                                   {RecipeKind::kBlock, "block"},
                                                                   {RecipeKind::kRowwise, "rowwise"}}};
inline constexpr EnumSpellings<AmaxUpdate, 2> kAmaxUpdateNames = {
    {{AmaxUpdate::kStep, "step"}, {AmaxUpdate::kMicrobatch, "microbatch"}}};
inline constexpr EnumSpellings<SwigluWgradCopy, 2> kSwigluWgradCopyNames = {
    {{SwigluWgradCopy::kBackward, "backward"}, {SwigluWgradCopy::kForward, "forward"}}};

template <class E, size_t N>
constexpr const char* spelling(const EnumSpellings<E, N>& names, E v) {
  for (const auto& [value, name] : names) {
    if (value == v) return name;
  }
  return "?";
}

inline const char* to_string(RecipeFormat f) { return spelling(kRecipeFormatNames, f); }
inline const char* to_string(AmaxComputeAlgo a) { return spelling(kAmaxComputeAlgoNames, a); }
inline const char* to_string(AmaxUpdate u) { return spelling(kAmaxUpdateNames, u); }
inline const char* to_string(SwigluWgradCopy w) { return spelling(kSwigluWgradCopyNames, w); }
inline const char* to_string(RecipeKind k) { return spelling(kRecipeKindNames, k); }

}  // namespace fp8
}  // namespace fp8t
