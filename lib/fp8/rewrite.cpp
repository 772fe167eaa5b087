#include "lib/fp8/rewrite.h"

#include <iomanip>  // std::setw
#include <map>      // std::map
#include <sstream>  // std::ostringstream

#include "lib/fp8/layers/fp8_activation.h"  // Fp8Gelu, Fp8Swiglu
#include "lib/fp8/layers/fp8_grouped_linear.h"  // Fp8GroupedLinear
#include "lib/fp8/layers/fp8_linear.h"      // Fp8Linear
#include "lib/fp8/layers/fp8_norm.h"        // Fp8Norm
#include "lib/fp8/layers/fp8_attention.h"   // Fp8Attention
#include "lib/config/fp8_recipe_fields.h"   // recipe_summary
#include "lib/model/model.h"                // Model::recompute (train.recompute activation)
#include "lib/model/layers.h"               // SlotModule, Linear, Norm
#include "lib/util/error.h"                 // FP8T_INPUT_CHECK

namespace fp8t {
namespace fp8 {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// "h0.attn.c_proj" matches "c_proj", "attn.c_proj" and "h0.attn.c_proj".
bool name_listed(const std::string& name, const std::vector<std::string>& list) {
  for (const std::string& s : list) {
    if (name == s) return true;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
        name[name.size() - s.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

// The rules every layer kind shares: listed in fp8.skip_layers, features not multiples of 16,
// in*out below fp8.min_features_product. "" when none applies.
std::string shared_skip_reason(int64_t in, int64_t out, const std::string& name, const Recipe& r) {
  if (name_listed(name, r.skip_layers)) return "listed in fp8.skip_layers";
  if (in % 16 != 0 || out % 16 != 0) {
    return "features " + std::to_string(in) + "x" + std::to_string(out) + " not multiples of 16 (FP8 GEMM requirement)";
  }
  if (in * out < r.min_features_product) {
    return "in*out " + std::to_string(in * out) + " below fp8.min_features_product " +
           std::to_string(r.min_features_product);
  }
  return "";
}

std::string skip_reason(const model::Linear& l, const std::string& name, const Scaling& scaling) {
  const std::string shared = shared_skip_reason(l.in_features, l.out_features, name, scaling.recipe());
  return shared.empty() ? scaling.unsupported_linear(l.in_features, l.out_features) : shared;
}

// A grouped layer runs whole in FP8 or whole in high precision.
std::string grouped_skip_reason(const model::GroupedLinear& l, const std::string& name, const Scaling& scaling) {
  const std::string shared = shared_skip_reason(l.in_features, l.out_features, name, scaling.recipe());
  if (!shared.empty()) return shared;
  const auto& o = scaling.recipe().override_linear_precision;
  if (o.fprop || o.dgrad || o.wgrad) {
    return "fp8.override_linear_precision is set: a grouped layer's GEMMs run all in FP8 or all in high precision";
  }
  return scaling.unsupported_grouped_linear();
}

using Containers = std::vector<std::pair<std::string, std::shared_ptr<model::SlotModule>>>;
using Fp8Linears = std::map<std::string, std::shared_ptr<Fp8Linear>>;

// The SlotModules of the tree in registration order (deterministic slot order), by full name.
Containers slot_containers(torch::nn::Module& root) {
  Containers containers;
  if (auto* self = dynamic_cast<model::SlotModule*>(&root)) {
    // The root is not owned by a shared_ptr we can reach; alias it without ownership.
    containers.emplace_back("", std::shared_ptr<model::SlotModule>(std::shared_ptr<model::SlotModule>{}, self));
  }
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    if (auto c = std::dynamic_pointer_cast<model::SlotModule>(item.value())) containers.emplace_back(item.key(), c);
  }
  return containers;
}

// train.recompute casts on a converted Linear: dgrad transposes the cached rowwise weight, and
// wgrad's input copy is cast again in the backward where the model says the producer keeps the
// input anyway (Fp8Linear::set_transposes_weight, set_recasts_input_columnwise). Returns what the
// report adds.
std::string defer_casts(Fp8Linear& layer, const model::SlotModule::Slot& slot, const Scaling& scaling) {
  const bool transpose = scaling.transposes_weight_codes();  // else the cache keeps both layouts
  layer.set_transposes_weight(transpose);
  layer.set_recasts_input_columnwise(slot.input_kept_by_producer);
  const std::string w = transpose ? "W^T transposed in dgrad" : "";
  if (!slot.input_kept_by_producer) return w;
  return w + (w.empty() ? "" : ", ") + "x^T cast again in the backward";
}

// Pass 1: Linear layers. Returns the converted ones by full name. casts: train.recompute casts.
Fp8Linears convert_linears(const Containers& containers, const std::shared_ptr<Scaling>& scaling, bool casts,
                           RewriteReport& report) {
  Fp8Linears fp8_linears;
  for (const auto& [prefix, container] : containers) {
    for (const auto& slot : container->slots()) {
      auto linear = std::dynamic_pointer_cast<model::Linear>(*slot.member);
      if (!linear) continue;
      const std::string name = join(prefix, slot.name);
      LayerDecision d{name, "Linear", std::to_string(linear->in_features) + "x" + std::to_string(linear->out_features),
                      false, skip_reason(*linear, name, *scaling),
                      static_cast<double>(linear->in_features * linear->out_features)};
      if (d.reason.empty()) {
        auto fp8 = std::make_shared<Fp8Linear>(*linear, name, scaling);
        if (casts) d.reason = defer_casts(*fp8, slot, *scaling);
        container->replace_slot(slot.name, fp8);
        fp8_linears[name] = fp8;
        d.converted = true;
        ++report.converted_linears;
      }
      report.layers.push_back(d);
    }
  }
  return fp8_linears;
}

// Pass 1b: grouped layers (a mixture of experts' experts): Fp8GroupedLinear, all three GEMMs in FP8.
void convert_grouped_linears(const Containers& containers, const std::shared_ptr<Scaling>& scaling,
                             RewriteReport& report) {
  for (const auto& [prefix, container] : containers) {
    for (const auto& slot : container->grouped_slots()) {
      auto grouped = std::dynamic_pointer_cast<model::GroupedLinear>(*slot.member);
      if (!grouped) continue;
      const std::string name = join(prefix, slot.name);
      LayerDecision d{name, "Grouped",
                      std::to_string(grouped->groups) + "x" + std::to_string(grouped->in_features) + "x" +
                          std::to_string(grouped->out_features),
                      false, grouped_skip_reason(*grouped, name, *scaling),
                      grouped->rows_per_token * static_cast<double>(grouped->in_features * grouped->out_features)};
      if (d.reason.empty()) {
        container->replace_grouped_slot(slot.name, std::make_shared<Fp8GroupedLinear>(*grouped, name, scaling));
        d.converted = true;
        d.reason = "grouped GEMMs, E4M3 gradients";
        ++report.converted_grouped;
      }
      report.layers.push_back(d);
    }
  }
}

// The share of the GEMM work per token (Linear and grouped layers) that runs in FP8.
double fp8_share(const RewriteReport& report) {
  double total = 0.0, fp8 = 0.0;
  for (const LayerDecision& d : report.layers) {
    total += d.gemm_macs_per_token;
    if (d.converted) fp8 += d.gemm_macs_per_token;
  }
  return total > 0.0 ? fp8 / total : 0.0;
}

// Pass 2: norms whose single consumer is now an Fp8Linear.
void convert_norms(const Containers& containers, const Fp8Linears& fp8_linears, RewriteReport& report) {
  for (const auto& [prefix, container] : containers) {
    for (const auto& slot : container->slots()) {
      auto norm = std::dynamic_pointer_cast<model::Norm>(*slot.member);
      if (!norm) continue;
      const std::string name = join(prefix, slot.name);
      LayerDecision d{name, norm->kind == model::Norm::Kind::kRMSNorm ? "RMSNorm" : "LayerNorm",
                      std::to_string(norm->dim), false, "", 0.0};
      const std::string consumer = slot.feeds.empty() ? "" : join(prefix, slot.feeds);
      const auto it = fp8_linears.find(consumer);
      if (consumer.empty()) {
        d.reason = "no single consumer Linear";
        // Its consumers may be FP8 Linears, which cast their input from full precision: a fused
        // residual add must hand them y unrounded, as the unfused norm does.
        norm->fused_output_autocast = false;
      } else if (it == fp8_linears.end()) {
        d.reason = "its consumer " + consumer + " stays in high precision";
      } else {
        container->replace_slot(slot.name, std::make_shared<Fp8Norm>(*norm, it->second));
        d.converted = true;
        ++report.converted_norms;
      }
      report.layers.push_back(d);
    }
  }
}

// Pass 3: activations (GELU, SwiGLU) next to an Fp8Linear: fused into that Linear's casts.
// defer: train.recompute activation (Fp8Activation::defers_columnwise). value_from_gradient:
// fp8.swiglu_wgrad_copy backward under a recipe with one scale per tensor, whose SwiGLU gradient
// cast can also write c_proj's wgrad copy (Fp8Activation::value_copy_from_gradient_cast).
void fuse_activations(const Containers& containers, const Fp8Linears& fp8_linears, bool defer,
                      bool value_from_gradient, RewriteReport& report) {
  for (const auto& [prefix, container] : containers) {
    for (const auto& slot : container->slots()) {
      auto act = std::dynamic_pointer_cast<model::Activation>(*slot.member);
      if (!act) continue;
      const std::string name = join(prefix, slot.name);
      const bool gelu = act->kind == model::Activation::Kind::kGeluTanh;
      LayerDecision d{name, gelu ? "GELU" : "SwiGLU", "", false, "", 0.0};
      auto find_fp8 = [&](const std::string& rel) -> std::shared_ptr<Fp8Linear> {
        if (rel.empty()) return nullptr;
        const auto it = fp8_linears.find(join(prefix, rel));
        return it == fp8_linears.end() ? nullptr : it->second;
      };
      std::shared_ptr<Fp8Linear> producer = find_fp8(slot.fed_by), consumer = find_fp8(slot.feeds);
      if (!producer && !consumer) {
        d.reason = "neither neighbouring Linear is in FP8";
      } else {
        const std::shared_ptr<Fp8Activation> fused =
            gelu ? std::shared_ptr<Fp8Activation>(std::make_shared<Fp8Gelu>(producer, consumer))
                 : std::make_shared<Fp8Swiglu>(producer, consumer);
        const bool from_gradient = !gelu && value_from_gradient && producer != nullptr && consumer != nullptr;
        fused->set_value_copy_from_gradient_cast(from_gradient);
        fused->set_defers_columnwise(defer && consumer != nullptr && !from_gradient);
        container->replace_slot(slot.name, fused);
        d.converted = true;
        d.reason = std::string("fused into ") + (consumer ? join(prefix, slot.feeds) + "'s input cast" : "") +
                   (producer && consumer ? " and " : "") +
                   (producer ? join(prefix, slot.fed_by) + "'s gradient cast" : "") +
                   (fused->defers_columnwise() ? " (wgrad copy cast again in the backward)" : "") +
                   (from_gradient ? " (" + join(prefix, slot.feeds) + "'s wgrad copy written by the gradient cast)" : "");
        ++report.fused_activations;
      }
      report.layers.push_back(d);
    }
  }
}

// Pass 4 (fp8.attention): every attention of the tree (model::AttentionHost) runs Fp8Attention.
// On CUDA the build must have cuDNN's FP8 attention: a startup error naming the key otherwise.
void convert_attention(torch::nn::Module& root, const std::shared_ptr<Scaling>& scaling, const at::Device& device,
                       RewriteReport& report, std::vector<std::shared_ptr<Fp8Attention>>& installed) {
  if (device.is_cuda()) {
    const std::string missing = cudnn_attention_unavailable();
    FP8T_INPUT_CHECK(missing.empty(), "fp8.attention = true on CUDA needs cuDNN's FP8 attention, which ", missing,
                     "; set fp8.attention false (or drop --fp8-attention)");
  }
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    auto host = std::dynamic_pointer_cast<model::AttentionHost>(item.value());
    if (!host) continue;
    installed.push_back(std::make_shared<Fp8Attention>(item.key(), scaling));
    host->set_attention_kernel(installed.back());
    report.layers.push_back(LayerDecision{item.key() + ".sdpa", "Attention", "", true,
                                          device.is_cuda() ? "cuDNN FP8 attention" : "FP8 attention (emulated)", 0.0});
    ++report.converted_attention;
  }
}

}  // namespace

RewriteResult rewrite_to_fp8(torch::nn::Module& root, const Recipe& recipe, const at::Device& device) {
  RewriteResult result;
  result.scaling = make_scaling(recipe);
  result.report.recipe_line = recipe_summary(recipe);
  const Containers containers = slot_containers(root);
  // train.recompute activation and casts: FP8 copies the backward casts again instead of keeping.
  const auto* as_model = dynamic_cast<const model::Model*>(&root);
  const Recompute recompute = as_model != nullptr ? as_model->recompute() : Recompute::kNone;
  const bool casts = recompute == Recompute::kCasts;
  const Fp8Linears fp8_linears = convert_linears(containers, result.scaling, casts, result.report);
  convert_grouped_linears(containers, result.scaling, result.report);
  result.report.fp8_gemm_share = fp8_share(result.report);
  convert_norms(containers, fp8_linears, result.report);
  fuse_activations(containers, fp8_linears, casts || recompute == Recompute::kActivation,
                   result.scaling->traits().per_tensor_scales &&
                       recipe.swiglu_wgrad_copy == SwigluWgradCopy::kBackward,
                   result.report);
  if (recipe.attention) convert_attention(root, result.scaling, device, result.report, result.attention);
  result.scaling->finalize(device);
  return result;
}

std::string RewriteReport::to_string() const {
  std::ostringstream os;
  size_t width = 5;
  for (const auto& l : layers) width = std::max(width, l.name.size());
  if (!recipe_line.empty()) os << recipe_line << "\n";
  os << "FP8 rewrite: " << converted_linears << " Linear" << (converted_grouped > 0 ? ", " + std::to_string(converted_grouped) + " grouped" : "")
     << " and " << converted_norms << " norm layers converted, "
     << fused_activations << " activations fused into FP8 casts; "
     << std::fixed << std::setprecision(1) << 100.0 * fp8_gemm_share << "% of " << (converted_grouped > 0 ? "the GEMM FLOPs (Linear and grouped)" : "Linear GEMM FLOPs") << " in FP8\n";
  for (const auto& l : layers) {
    os << "  " << std::left << std::setw(static_cast<int>(width)) << l.name << "  " << std::setw(9) << l.kind << " "
       << std::setw(11) << l.shape << " "
       << (l.converted ? (l.reason.empty() ? "fp8" : "fp8: " + l.reason) : "kept: " + l.reason) << "\n";
  }
  return os.str();
}

}  // namespace fp8
}  // namespace fp8t
