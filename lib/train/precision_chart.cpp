#include "lib/train/precision_chart.h"

#include <fmt/format.h>   // fmt::format
#include <torch/torch.h>  // torch::nn::EmbeddingImpl, torch::nn::Module

#include <algorithm>  // std::find_if
#include <cctype>     // std::isdigit
#include <iomanip>    // std::setw
#include <iterator>   // std::prev
#include <map>        // std::map
#include <set>        // std::set
#include <sstream>    // std::ostringstream

#include "lib/config/fields.h"          // config::to_string
#include "lib/config/parallel_layout.h"  // ParallelLayout
#include "lib/dist/communicator.h"      // dist::Communicator
#include "lib/dist/fully_sharded.h"     // dist::FullyShardedModel
#include "lib/dist/grad_sync.h"         // dist::GradientSync
#include "lib/fp8/recipes/scaling.h"    // fp8::Scaling
#include "lib/fp8/layers/fp8_grouped_linear.h"  // fp8::Fp8GroupedLinear
#include "lib/fp8/layers/fp8_linear.h"  // fp8::Fp8Linear
#include "lib/model/moe_layer.h"        // model::Router
#include "lib/fp8/rewrite.h"            // fp8::RewriteReport
#include "lib/model/attention_kernel.h"  // model::AttentionHost
#include "lib/model/model.h"            // model::Model
#include "lib/model/layers.h"           // model::Linear
#include "lib/step/loss_scaler.h"       // LossScaler
#include "lib/optim/optimizer.h"        // AdamW
#include "lib/step/session.h"           // Session
#include "lib/util/error.h"             // FP8T_CHECK

namespace fp8t::train {

namespace {

std::string num(double v) { return fmt::format("{:g}", v); }  // 65536, 2, 0.5

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "FP32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "FP16";
    case at::kDouble: return "FP64";
    default: return c10::toString(t);
  }
}

// Groups of a row in first-seen order, keyed by (precision, detail).
class RowBuilder {
 public:
  RowBuilder(std::string key, std::string item) : row_{std::move(key), std::move(item), {}} {}
  void add(const std::string& precision, const std::string& detail, const std::string& name = "") {
    auto it = std::find_if(row_.groups.begin(), row_.groups.end(),
                           [&](const ChartGroup& g) { return g.precision == precision && g.detail == detail; });
    if (it == row_.groups.end()) {
      row_.groups.push_back(ChartGroup{precision, detail, {}});
      it = std::prev(row_.groups.end());
    }
    if (!name.empty()) it->names.push_back(name);
  }
  ChartRow take() { return std::move(row_); }

 private:
  ChartRow row_;
};

// The parameters of the model once each (a tied weight under its first owner), with the module
// that owns them.
struct OwnedParam {
  std::string name;
  at::Tensor tensor;
  const torch::nn::Module* owner;
  bool tied_again = false;  // also registered by a later module (the tied LM head)
};

std::vector<OwnedParam> owned_parameters(const model::Model& net) {
  std::vector<OwnedParam> out;
  auto visit = [&](const std::string& prefix, const torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      const auto* impl = p.value().unsafeGetTensorImpl();
      auto it = std::find_if(out.begin(), out.end(), [&](const OwnedParam& o) { return o.tensor.unsafeGetTensorImpl() == impl; });
      if (it != out.end()) {
        it->tied_again = true;
        continue;
      }
      out.push_back(OwnedParam{prefix.empty() ? p.key() : prefix + "." + p.key(), p.value(), &m});
    }
  };
  visit("", net);
  for (const auto& item : net.named_modules("", /*include_self=*/false)) visit(item.key(), *item.value());
  return out;
}

// "fprop E4M3 x E4M3, dgrad E5M2 x E4M3, wgrad E5M2 x E4M3" from the layer's scaling slots and
// the recipe's overrides (an overridden GEMM runs in `hp`).
std::string fp8_gemms(const fp8::Fp8Linear& l, const std::string& hp, bool* any_fp8) {
  const fp8::Scaling& s = l.scaling();
  const auto& ov = s.recipe().override_linear_precision;
  auto fmt = [&](int slot) { return std::string(fp8::format_name(s.slot_format(slot))); };
  auto gemm = [&](const char* name, bool high, int a, int b) {
    *any_fp8 = *any_fp8 || !high;
    return std::string(name) + " " + (high ? hp + " (override)" : fmt(a) + " x " + fmt(b));
  };
  return gemm("fprop", ov.fprop, l.slot_input(), l.slot_weight()) + ", " +
         gemm("dgrad", ov.dgrad, l.slot_grad_output(), l.slot_weight()) + ", " +
         gemm("wgrad", ov.wgrad, l.slot_grad_output(), l.slot_input());
}

std::string skip_reason(const fp8::RewriteReport* report, const std::string& name) {
  if (report == nullptr) return "";
  for (const auto& d : report->layers) {
    if (d.name == name) return d.reason;
  }
  return "";
}

// Only a recipe whose scales come from each rank's amaxes (RecipeTraits::rank_amaxes: delayed)
// reduces amaxes across ranks (the other recipes' weight scales agree because the weights do).
bool reduces_amax(const step::Session& s) {
  return s.scaling() != nullptr && s.scaling()->traits().rank_amaxes && s.config().fp8.reduce_amax;
}

ChartRow compute_row(const step::Session& s) {
  RowBuilder row("compute_gemm", "compute (GEMM)");
  const std::string hp = dtype_name(s.autocast_dtype());
  const bool cpu = s.device().is_cpu();
  std::string how = "; emulated on the CPU: FP32 GEMMs of FP8-rounded operands";
  if (!cpu && s.scaling()) {
    // cuBLASLt accumulates in FP32; "fast accumulation" promotes to FP32 less often.
    std::string fast_gemms;
    for (const fp8::GemmKind k : {fp8::GemmKind::kFprop, fp8::GemmKind::kDgrad, fp8::GemmKind::kWgrad}) {
      if (s.scaling()->fast_accumulation(k)) fast_gemms += std::string(fast_gemms.empty() ? "" : ", ") + fp8::to_string(k);
    }
    how = "; cuBLASLt FP8 GEMMs, FP32 accumulation" +
          (fast_gemms.empty() ? std::string() : " (fast accumulation in " + fast_gemms + ")");
  }
  const std::string linear = s.autocast_dtype() == at::kFloat ? "Linear" : "Linear (autocast)";
  for (const auto& item : s.model().named_modules("", /*include_self=*/false)) {
    const torch::nn::Module* m = item.value().get();
    if (const auto* f = dynamic_cast<const fp8::Fp8Linear*>(m)) {
      bool any_fp8 = false;
      const std::string gemms = fp8_gemms(*f, hp, &any_fp8);
      row.add(any_fp8 ? "FP8" : hp, "FP8 Linear: " + gemms + how, item.key());
    } else if (dynamic_cast<const model::Linear*>(m) != nullptr) {
      const std::string reason = skip_reason(s.rewrite(), item.key());
      row.add(hp, s.scaling() ? "Linear kept out of FP8 (" + (reason.empty() ? "not rewritten" : reason) + ")" : linear,
              item.key());
    } else if (dynamic_cast<const fp8::Fp8GroupedLinear*>(m) != nullptr) {
      row.add("FP8", "FP8 grouped (experts): fprop, dgrad and wgrad E4M3 x E4M3 grouped GEMMs" +
                         std::string(cpu ? "; emulated on the CPU: FP32 GEMMs of FP8-rounded operands per group"
                                         : "; at::_scaled_grouped_mm, FP32 accumulation, BF16 out"),
              item.key());
    } else if (dynamic_cast<const model::GroupedLinear*>(m) != nullptr) {
      const std::string reason = skip_reason(s.rewrite(), item.key());
      row.add(hp, s.scaling() ? "grouped (experts) kept out of FP8 (" + (reason.empty() ? "not rewritten" : reason) + ")"
                              : "grouped (experts) GEMMs",
              item.key());
    } else if (dynamic_cast<const model::Router*>(m) != nullptr) {
      row.add("FP32", "router (expert scores and top-k; never FP8)", item.key());
    }
  }
  for (const auto& item : s.model().named_modules("", /*include_self=*/false)) {
    // Any family's attention module that takes a kernel (model::AttentionHost), not one class.
    const auto* attn = dynamic_cast<const model::AttentionHost*>(item.value().get());
    if (attn == nullptr) continue;
    if (attn->has_attention_kernel()) {  // fp8.attention: the rewrite's Fp8Attention
      row.add("FP8", std::string("FP8 attention: Q, K, V, P E4M3, dO and dS in the gradient format, FP32 math") +
                         (cpu ? "; emulated on the CPU" : "; cuDNN's fused FP8 attention"),
              item.key());
    } else {
      row.add(hp, "attention QK^T and AV (scaled_dot_product_attention)", item.key());
    }
  }
  return row.take();
}

ChartRow weights_row(const step::Session& s, const std::vector<OwnedParam>& params) {
  RowBuilder row("weights", "weights");
  const std::string cast = s.autocast_dtype() == at::kFloat
                               ? "the GEMMs read them as stored"
                               : "autocast gives the GEMMs " + dtype_name(s.autocast_dtype()) + " copies, cast per forward";
  for (const OwnedParam& p : params) {
    const std::string dtype = dtype_name(p.tensor.scalar_type());
    const bool is_weight = p.name.size() >= 6 && p.name.compare(p.name.size() - 6, 6, "weight") == 0;
    std::string detail = "biases and norm gains";
    if (const auto* f = dynamic_cast<const fp8::Fp8Linear*>(p.owner); f && is_weight) {
      const std::string codes = fp8::format_name(f->scaling().slot_format(f->slot_weight()));
      detail = f->gathered_weight() != nullptr
                   ? "FP8 Linear weights; ZeRO-3: the GEMMs read " + codes + " codes cast once per optimizer step "
                     "on the rank that holds each part, then gathered"
                   : "FP8 Linear weights; the GEMMs read " + codes + " copies, cast once per optimizer step";
    } else if (dynamic_cast<const model::Linear*>(p.owner) != nullptr && is_weight) {
      detail = "Linear weights; " + cast;
    } else if (dynamic_cast<const fp8::Fp8GroupedLinear*>(p.owner) != nullptr) {
      detail = "FP8 grouped (experts) weights; the GEMMs read E4M3 copies, cast once per optimizer step";
    } else if (dynamic_cast<const model::GroupedLinear*>(p.owner) != nullptr) {
      detail = "grouped (experts) weights; " + cast;
    } else if (dynamic_cast<const model::Router*>(p.owner) != nullptr) {
      detail = "router weights (FP32 scores)";
    } else if (dynamic_cast<const torch::nn::EmbeddingImpl*>(p.owner) != nullptr) {
      detail = p.tied_again ? "embeddings (lookups; wte is also the LM head's weight: " + cast + ")"
                            : "embeddings (lookups, no GEMM)";
    }
    row.add(dtype, detail, p.name);
  }
  return row.take();
}

// The optimizer's tensors by name once training is prepared; empty before, when the rows read
// the rules AdamW's constructor applies instead.
std::map<std::string, at::Tensor> optimizer_state(const step::Session& s) {
  return s.training_prepared() ? s.optimizer().state_dict() : std::map<std::string, at::Tensor>{};
}

ChartRow master_row(const step::Session& s, const std::vector<OwnedParam>& params) {
  RowBuilder row("master_weights", "master weights");
  const std::map<std::string, at::Tensor> state = optimizer_state(s);
  for (const OwnedParam& p : params) {
    const auto it = state.find(p.name + ".master");
    const bool copy = s.training_prepared() ? it != state.end() : optim::AdamW::needs_master_copy(p.tensor);
    if (copy) {
      const at::ScalarType t = it != state.end() ? it->second.scalar_type() : optim::AdamW::kStateDtype;
      row.add(dtype_name(t), "AdamW's master copies of the " + dtype_name(p.tensor.scalar_type()) + " weights", p.name);
    } else if (s.fully_sharded() != nullptr) {
      row.add("FP32", "ZeRO-3: each rank holds and updates its 1/" + std::to_string(s.fully_sharded()->shard_group_size()) +
                          " of the FP32 weights (the master shards); the parameters hold no data between steps", p.name);
    } else {
      row.add("none", "AdamW updates the " + dtype_name(p.tensor.scalar_type()) +
                          " weights in place: they are the master weights", p.name);
    }
  }
  return row.take();
}

ChartRow gradients_row(const step::Session& s, const std::vector<OwnedParam>& params) {
  RowBuilder row("weight_gradients", "weight gradients");
  std::string detail = s.fully_sharded() ? "ZeRO-3: a unit's gradients exist whole during its backward only; each "
                                           "micro-batch's are reduce-scattered and summed into this rank's FP32 shard"
                       : !s.gradient_sync()           ? "accumulated over the micro-batches"
                       : !s.gradient_sync()->sharded() ? "accumulated in the all-reduce buckets"
                                                       : "ZeRO-1: accumulated in buckets that exist during the backward "
                                                         "only; each rank keeps its reduce-scattered shard";
  if (s.loss_scaler()) detail += "; loss-scaled in the backward, divided by the scale as AdamW reads them";
  if (s.scaling()) {
    detail += "; the FP8 wgrad GEMMs write FP32";
  } else if (s.device().is_cuda() && s.autocast_dtype() != at::kFloat) {
    detail += "; the wgrad GEMMs write FP32 (ops::linear)";
  }
  for (const OwnedParam& p : params) {
    // An undefined gradient is created by autograd in the parameter's dtype.
    const at::Tensor& g = p.tensor.grad();
    row.add(dtype_name(g.defined() ? g.scalar_type() : p.tensor.scalar_type()), detail, p.name);
  }
  return row.take();
}

ChartRow optimizer_row(const step::Session& s, const std::vector<OwnedParam>& params) {
  RowBuilder row("optimizer_states", "optimizer states");
  const std::map<std::string, at::Tensor> state = optimizer_state(s);
  const MomentsDtype moments = s.config().train.moments_dtype;
  const std::string how = moments == MomentsDtype::kBf16
                              ? "AdamW exp_avg + exp_avg_sq (train.moments_dtype bf16: FP32 math, stored rounded)"
                              : "AdamW exp_avg + exp_avg_sq (FP32 math, stored as computed)";
  for (const OwnedParam& p : params) {
    auto dtype = [&](const char* suffix) {
      const auto it = state.find(p.name + suffix);
      return dtype_name(it != state.end() ? it->second.scalar_type() : optim::AdamW::moments_scalar_type(moments));
    };
    row.add(dtype(".exp_avg") + " + " + dtype(".exp_avg_sq"), how, p.name);
  }
  return row.take();
}

std::string mib(double bytes) { return fmt::format("{:.3g} MiB", bytes / (1024.0 * 1024.0)); }

// ZeRO-3: what travels per micro-batch (lib/dist/fully_sharded.h, lib/dist/README.md).
void add_zero3_communication(const step::Session& s, const dist::Communicator& comm, RowBuilder& row) {
  const dist::FullyShardedModel& z = *s.fully_sharded();
  const DistSection& d = s.config().dist;
  int64_t fp8_elements = 0;
  std::string codes = "E4M3";
  for (const auto& item : s.model().named_modules("", /*include_self=*/false)) {
    const auto* f = dynamic_cast<const fp8::Fp8Linear*>(item.value().get());
    if (f == nullptr || f->gathered_weight() == nullptr) continue;
    fp8_elements += f->weight.numel();
    codes = fp8::format_name(f->scaling().slot_format(f->slot_weight()));
  }
  const int64_t other_elements = s.model().parameter_count() - fp8_elements;
  const std::string ranks = " over the " + std::to_string(z.shard_group_size()) + " ranks of a shard group (" +
                            comm.backend_name() + "), dist.prefetch " + std::to_string(d.prefetch) + " unit(s) ahead";
  const std::string when = d.reshard_after_forward ? " per pass, before each unit's forward and again for its backward"
                                                   : " per pass, before each unit's forward (kept to its backward)";
  if (fp8_elements > 0) {
    row.add("FP8", "ZeRO-3: all-gather of the FP8 Linears' weights as 1-byte " + codes + " codes + " +
                       s.scaling()->traits().gathered_weight_scales + " scales, cast where each part lives with the " +
                       "recipe's weight scale: " + mib(static_cast<double>(fp8_elements)) + when + ranks);
  }
  const at::ScalarType compute = s.autocast_dtype();
  row.add(dtype_name(compute), "ZeRO-3: all-gather of the other weights in the compute dtype: " +
                                   mib(static_cast<double>(other_elements) * c10::elementSize(compute)) + when + ranks);
  const at::ScalarType reduce = d.reduce_dtype == ReduceDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  const bool hybrid = z.shard_group_size() < comm.world_size();
  row.add(dtype_name(reduce),
          "ZeRO-3: gradient reduce-scatter of each unit as its backward ends (dist.reduce_dtype), " +
              mib(static_cast<double>(s.model().parameter_count()) * c10::elementSize(reduce)) +
              " per micro-batch, summed into FP32 shards" +
              (hybrid ? "; the FP32 shards all-reduced across the " + std::to_string(comm.world_size() / z.shard_group_size()) +
                            " shard groups once per step"
                      : std::string()));
  if (fp8_elements > 0 && s.scaling()->weight_parts().whole_amax) {
    row.add("FP32", "ZeRO-3: one MAX all-reduce of every FP8 weight's amax per step (its scale needs the whole "
                    "tensor's amax; each rank holds parts)");
  }
}

ChartRow communication_row(const step::Session& s, int planned_world_size) {
  RowBuilder row("communication", "communication");
  const std::string grads = dtype_name(s.parameters().empty() ? at::kFloat
                                       : s.parameters().front().grad().defined()
                                           ? s.parameters().front().grad().scalar_type()
                                           : s.parameters().front().scalar_type());
  const dist::Communicator* comm = s.communicator();
  if (comm != nullptr && s.fully_sharded() != nullptr) {
    add_zero3_communication(s, *comm, row);
    if (reduces_amax(s)) {
      row.add(dtype_name(s.scaling()->amax_history().scalar_type()),
              "FP8 amax MAX all-reduce of " + std::to_string(s.scaling()->num_slots()) +
                  " slots in one collective before each scale update");
    }
    row.add("FP32", "parameter broadcast from rank 0, once at the start (before the model is sharded)");
  } else if (comm != nullptr && s.gradient_sync() != nullptr) {
    const bool zero = s.gradient_sync()->sharded();
    row.add(grads, std::string(zero ? "ZeRO-1: gradient reduce-scatter (average of this rank's shard)"
                                    : "gradient all-reduce (average)") +
                       " in " + std::to_string(s.gradient_sync()->num_buckets()) +
                       " buckets of up to " + num(s.config().dist.bucket_mb) + " MiB over " +
                       comm->backend_name() + ", " + std::to_string(comm->world_size()) +
                       " ranks, during the last backward");
    if (zero) {
      row.add(grads, "ZeRO-1: all-gather of the updated weights after AdamW; the AdamW moments are sharded "
                     "across the ranks (each holds 1/" + std::to_string(comm->world_size()) + ")");
    }
    if (reduces_amax(s)) {
      row.add(dtype_name(s.scaling()->amax_history().scalar_type()),
              "FP8 amax MAX all-reduce of " + std::to_string(s.scaling()->num_slots()) +
                  " slots in one collective before each scale update");
    }
    row.add(dtype_name(s.parameters().empty() ? at::kFloat : s.parameters().front().scalar_type()),
            "parameter broadcast from rank 0, once at the start");
  } else if (planned_world_size > 1 && ParallelLayout::of(s.config().dist).shards_weights()) {
    const bool fp8_codes = s.scaling() != nullptr && s.scaling()->weight_parts().fp8_gather;
    row.add(grads, "ZeRO-3 over " + std::to_string(planned_world_size) + " ranks: weights all-gathered per unit (" +
                       (fp8_codes ? "FP8 Linears' as FP8 codes, the rest in " : "in ") + dtype_name(s.autocast_dtype()) +
                       "), gradients " +
                       "reduce-scattered in " + (s.config().dist.reduce_dtype == ReduceDtype::kBf16 ? "BF16" : "FP32") +
                       " (NCCL between GPUs, Gloo between CPUs)");
  } else if (planned_world_size > 1) {
    row.add(grads, "gradient all-reduce (average) over " + std::to_string(planned_world_size) +
                       " ranks (NCCL between GPUs, Gloo between CPUs)" +
                       (reduces_amax(s) ? "; FP32 amax MAX all-reduce before scale updates" : ""));
  } else {
    row.add("none", "one process: no collectives");
  }
  return row.take();
}

ChartRow loss_scaling_row(const step::Session& s) {
  RowBuilder row("loss_scaling", "loss scaling");
  if (const step::LossScaler* ls = s.loss_scaler()) {
    const step::LossScalerOptions& o = ls->options();
    row.add("dynamic", "scale " + num(ls->read_scale()) + " (init " + num(o.init_scale) +
                           "), x" + num(o.growth_factor) + " after " +
                           std::to_string(o.growth_interval) + " finite steps, x" +
                           num(o.backoff_factor) +
                           " and the step skipped on inf/NaN gradients (torch.amp.GradScaler's rules)");
  } else if (const fp8::Scaling* fs = s.scaling()) {
    const fp8::RecipeTraits& recipe = fs->traits();
    row.add("none", std::string("the weight gradients are FP32; the FP8 tensors have ") +
                        (recipe.per_tensor_scales ? "per-tensor " : "") + recipe.name + " scaling (" +
                        std::to_string(fs->num_slots()) + " slots)");
  } else {
    row.add("none", dtype_name(s.autocast_dtype()) + " has FP32's exponent range");
  }
  return row.take();
}

}  // namespace

std::string ChartRow::summary() const {
  std::vector<std::string> seen;
  for (const ChartGroup& g : groups) {
    if (std::find(seen.begin(), seen.end(), g.precision) == seen.end()) seen.push_back(g.precision);
  }
  std::string out;
  for (const auto& p : seen) out += (out.empty() ? "" : " / ") + p;
  return out;
}

const ChartRow& PrecisionChart::row(const std::string& key) const {
  for (const ChartRow& r : rows) {
    if (r.key == key) return r;
  }
  FP8T_CHECK(false, "precision chart has no row '", key, "'");
  return rows.front();
}

PrecisionChart precision_chart(const step::Session& session, int planned_world_size) {
  const std::vector<OwnedParam> params = owned_parameters(session.model());
  PrecisionChart chart{config::to_string(session.config().precision), session.device().str(), {}};
  chart.rows.push_back(compute_row(session));
  chart.rows.push_back(communication_row(session, planned_world_size));
  chart.rows.push_back(weights_row(session, params));
  chart.rows.push_back(master_row(session, params));
  chart.rows.push_back(gradients_row(session, params));
  chart.rows.push_back(optimizer_row(session, params));
  chart.rows.push_back(loss_scaling_row(session));
  return chart;
}

std::string compress_names(const std::vector<std::string>& names, size_t max_entries) {
  std::vector<std::pair<std::string, int>> groups;
  for (const std::string& name : names) {
    std::string pattern;
    size_t start = 0;
    while (start <= name.size()) {
      const size_t dot = std::min(name.find('.', start), name.size());
      const std::string part = name.substr(start, dot - start);
      // A block index: "12", or "h12" (GPT-2's block names); "ln_1" is a layer name, kept.
      const size_t digits = part.find_first_of("0123456789");
      const bool index = digits != std::string::npos && part.find('_') == std::string::npos &&
                         std::all_of(part.begin() + static_cast<std::ptrdiff_t>(digits), part.end(),
                                     [](unsigned char c) { return std::isdigit(c); });
      if (start > 0) pattern += '.';
      pattern += index ? part.substr(0, digits) + "*" : part;
      start = dot + 1;
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == pattern; });
    if (it == groups.end()) {
      groups.emplace_back(pattern, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (size_t i = 0; i < groups.size() && i < max_entries; ++i) {
    const auto& [pattern, n] = groups[i];
    out += (out.empty() ? "" : ", ") + pattern + (n > 1 ? " x" + std::to_string(n) : "");
  }
  if (groups.size() > max_entries) out += ", and " + std::to_string(groups.size() - max_entries) + " more";
  return out;
}

std::string PrecisionChart::to_string() const {
  std::ostringstream os;
  os << "precision chart (" << precision << " on " << device << "):\n";
  for (const ChartRow& r : rows) {
    bool first = true;
    for (const ChartGroup& g : r.groups) {
      os << "  " << std::left << std::setw(18) << (first ? r.item : "") << std::setw(14) << g.precision << g.detail;
      if (r.groups.size() == 1 && !g.names.empty()) {
        os << " (all " << g.names.size() << ")";
      } else if (!g.names.empty()) {
        os << " [" << g.names.size() << "]: " << compress_names(g.names, 6);
      }
      os << "\n";
      first = false;
    }
  }
  return os.str();
}

nlohmann::json PrecisionChart::to_json() const {
  nlohmann::json out = {{"precision", precision}, {"device", device}};
  for (const ChartRow& r : rows) {
    nlohmann::json groups = nlohmann::json::array();
    for (const ChartGroup& g : r.groups) {
      groups.push_back({{"precision", g.precision}, {"detail", g.detail}, {"count", g.names.size()}, {"names", g.names}});
    }
    out[r.key] = {{"item", r.item}, {"precision", r.summary()}, {"groups", groups}};
  }
  return out;
}

}  // namespace fp8t::train
