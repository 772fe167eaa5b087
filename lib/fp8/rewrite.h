// The FP8 rewrite pass: walks a LibTorch module tree and puts Fp8Linear in place of every
// eligible model::Linear and Fp8Norm in place of every norm whose single consumer became an
// Fp8Linear. Weights are kept (the same tensors, the same parameter names), and the typed
// members of the model follow (model::SlotModule::replace_slot).
//
// A grouped layer (model::GroupedLinear in a grouped slot: a mixture of experts' experts) becomes an
// Fp8GroupedLinear unless it is listed in recipe.skip_layers, its features are not multiples of
// 16, fp8.override_linear_precision names any GEMM, or the recipe has no grouped GEMM
// (Scaling::unsupported_grouped_linear: block).
//
// Skip rules of a Linear, in order: the layer's name is in recipe.skip_layers (exact, or the last name
// components, e.g. "lm_head" or "attn.c_proj"); in or out features not a multiple of 16
// (cuBLASLt FP8 requirement); in*out below recipe.min_features_product (too small to gain); the
// recipe cannot run it (Scaling::unsupported_linear, e.g. the block GEMM's constraints).
//
// An activation between two Linears (model::Activation slot) becomes an Fp8Gelu or Fp8Swiglu
// when either neighbour is an Fp8Linear: the activation runs inside the FP8 cast of c_proj's
// input and of c_fc's output gradient (lib/fp8/layers/fp8_activation.h).
//
// fp8.attention: every attention (model::AttentionHost) runs Fp8Attention
// (lib/fp8/layers/fp8_attention.h); on CUDA a build without cuDNN's FP8 attention refuses it
// (kBadInput naming the key).
//
// A model::Model's train.recompute (Model::recompute) decides which FP8 copies the backward casts again instead of keeping:
// activation: the activation's copy for c_proj's wgrad; casts: that, every Linear's transposed
// weight (Fp8Linear::set_transposes_weight), and the wgrad input copy of every Linear whose model
// slot says its producer keeps its input (set_recasts_input_columnwise: attention's c_proj).
#pragma once

#include <torch/torch.h>  // torch::nn::Module

#include <memory>  // std::shared_ptr
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/config/fp8_recipe.h"    // Recipe
#include "lib/fp8/recipes/scaling.h"  // Scaling

namespace fp8t {
namespace fp8 {

struct LayerDecision {
  std::string name;
  std::string kind;      // "Linear", "Grouped", "LayerNorm", "RMSNorm", "GELU", "SwiGLU", "Attention"
  std::string shape;     // "768x3072" (in x out) for Linear, "64x768x3072" (groups x in x out) for
                         // grouped layers, "768" for norms, "" for activations
  bool converted = false;
  std::string reason;    // why it was skipped; for a fused activation, what it was fused into
  double gemm_macs_per_token = 0.0;  // in*out for Linear, rows_per_token*in*out for grouped, 0 for norms
};

struct RewriteReport {
  std::vector<LayerDecision> layers;
  int converted_linears = 0;
  int converted_grouped = 0;  // grouped layers (a mixture of experts' experts) now Fp8GroupedLinear
  int converted_norms = 0;
  int fused_activations = 0;  // GELUs fused into the casts of the FP8 Linears around them
  int converted_attention = 0;  // attentions running Fp8Attention (fp8.attention)
  double fp8_gemm_share = 0.0;  // share of Linear GEMM work (per token) now in FP8
  std::string recipe_line;      // the recipe and the fields that take effect under it
  std::string to_string() const;
};

class Fp8Attention;

struct RewriteResult {
  std::shared_ptr<Scaling> scaling;  // the recipe's state class (make_scaling), finalized on `device`
  RewriteReport report;
  std::vector<std::shared_ptr<Fp8Attention>> attention;  // fp8.attention: the kernels installed
};

RewriteResult rewrite_to_fp8(torch::nn::Module& root, const Recipe& recipe, const at::Device& device);

}  // namespace fp8
}  // namespace fp8t
