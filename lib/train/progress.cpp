#include "lib/train/progress.h"

#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::warn

#include <algorithm>  // std::sort, std::max
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "lib/config/fields.h"   // config::to_string
#include "lib/fp8/recipes/scaling.h"  // fp8::Scaling
#include "lib/fp8/rewrite.h"          // fp8::RewriteReport
#include "lib/model/model.h"     // model::Model::parameter_count
#include "lib/train/run_setup.h"  // TrainingJob
#include "lib/util/memory.h"     // peak_memory_bytes

namespace fp8t::train {

namespace {

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json worst_fp8_slots(const nlohmann::json& worst_by_slot) {
  struct Entry {
    double fraction;
    int64_t step;
    std::string slot;
  };
  std::vector<Entry> sat, under;
  for (const auto& [slot, v] : worst_by_slot.items()) {
    sat.push_back({v.at("saturated").get<double>(), v.value("saturated_step", int64_t{0}), slot});
    under.push_back({v.at("underflow").get<double>(), v.value("underflow_step", int64_t{0}), slot});
  }
  auto top = [](std::vector<Entry> v) {
    std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) {
      return a.fraction != b.fraction ? a.fraction > b.fraction : a.slot > b.slot;
    });
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < v.size() && i < 5; ++i) {
      out.push_back({{"slot", v[i].slot}, {"fraction", v[i].fraction}, {"step", v[i].step}});
    }
    return out;
  };
  return {{"most_saturated", top(sat)}, {"most_underflow", top(under)}};
}

nlohmann::json Progress::checkpoint_meta() const {
  return {{"best_val_loss", optional_json(best_val)}, {"tokens", tokens}, {"elapsed_s", elapsed_s()},
          {"skipped_steps", skipped_steps}};
}

void Progress::restore(const nlohmann::json& meta, int64_t at_step) {
  start_step = step = at_step;
  if (meta.contains("tokens")) tokens = meta["tokens"].get<int64_t>();
  if (meta.contains("elapsed_s")) elapsed_before = meta["elapsed_s"].get<double>();
  if (meta.contains("skipped_steps")) skipped_steps = meta["skipped_steps"].get<int64_t>();
  log_window = meta.value("log_window", nlohmann::json());
  if (meta.contains("best_val_loss") && !meta["best_val_loss"].is_null()) {
    best_val = meta["best_val_loss"].get<double>();
  }
}

void Progress::record_eval(double val_loss) {
  last_val = val_loss;
  if (!best_val || val_loss < *best_val) best_val = val_loss;
}

void Progress::record_fp8_stats(const nlohmann::json& rows, int64_t at_step) {
  for (const auto& s : rows) {
    auto& w = worst_fp8[s["slot"].get<std::string>()];
    if (w.is_null()) w = {{"saturated", 0.0}, {"underflow", 0.0}, {"saturated_step", at_step}, {"underflow_step", at_step}};
    for (const char* key : {"saturated", "underflow"}) {
      const double v = s[key].get<double>();
      if (v > w.value(key, 0.0)) w[key] = v, w[std::string(key) + "_step"] = at_step;
    }
  }
}

void Progress::record_scale_spread(double spread, int64_t at_step, bool expect_identical) {
  if (expect_identical && spread != 0.0 && max_scale_spread == 0.0) {
    spdlog::warn("fp8: the ranks use different scales at step {} (largest difference {}); the amax "
                 "reduction is not working", at_step, spread);
  }
  max_scale_spread = std::max(max_scale_spread, spread);
}

nlohmann::json Progress::summary(const TrainingJob& run) const {
  const double wall_s = wall.seconds();
  nlohmann::json out = {
      {"status", status},
      {"run", run.cfg.run.name},
      {"precision", config::to_string(run.cfg.precision)},
      {"device", run.device.str()},
      {"world_size", run.layout.world_size},
      {"steps", step},
      {"tokens", tokens},
      {"final_loss", last_loss},
      {"final_val_loss", optional_json(last_val)},
      {"best_val_loss", optional_json(best_val)},
      {"wall_time_s", elapsed_before + wall_s},
      {"tokens_per_s", (step - start_step) * run.tokens_per_step / std::max(1e-9, wall_s)},
      {"peak_memory_bytes", peak_memory_bytes(run.device)},
      {"parameters", run.session->model().parameter_count()},
      {"skipped_steps", skipped_steps},
  };
  out["tokens_seen"] = run.data.tokens_seen();
  if (auto epoch = run.data.epoch()) {
    out["epoch"] = *epoch;
    out["train_tokens"] = run.data.train_tokens();
    out["tokens_per_epoch"] = run.data.tokens_per_epoch();
  }
  if (auto floor = run.data.entropy_floor_nats()) out["entropy_floor"] = *floor;
  if (run.scaling() && run.cfg.fp8.stats) out["fp8_worst"] = worst_fp8_slots(worst_fp8);
  if (run.scaling()) out["fp8"] = fp8_summary(run, *this);
  if (run.scaling() && run.comm) out["fp8_max_scale_spread_across_ranks"] = max_scale_spread;
  return out;
}

nlohmann::json Progress::failure_summary(const std::string& error) const {
  nlohmann::json out = {
      {"status", status}, {"steps", in_loop ? step + 1 : step}, {"error", error}, {"skipped_steps", skipped_steps}};
  if (diverged_at > 0) out["diverged_at_step"] = diverged_at;
  return out;
}

namespace {

// The Linear and grouped (experts) layers of the rewrite: how many ran in FP8, and the names of
// those kept.
void add_linears(const fp8::RewriteReport& report, nlohmann::json& out) {
  int64_t linears = 0, grouped = 0;
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& layer : report.layers) {
    if (layer.kind != "Linear" && layer.kind != "Grouped") continue;
    ++(layer.kind == "Linear" ? linears : grouped);
    if (!layer.converted) kept.push_back(layer.name);
  }
  out["linears"] = linears;
  out["fp8_linears"] = report.converted_linears;
  if (grouped > 0) {
    out["grouped"] = grouped;
    out["fp8_grouped"] = report.converted_grouped;
  }
  out["fp8_gemm_flops_share"] = report.fp8_gemm_share;
  out["kept_linears"] = kept;
}

// The smallest and largest per-tensor scale in use at the end (one host read; delayed and
// current scaling: block scales are per block and change with every cast).
void add_scale_range(const fp8::Scaling& scaling, nlohmann::json& out) {
  if (!scaling.traits().per_tensor_scales || !scaling.scale().defined() || scaling.scale().numel() == 0) return;
  const at::Tensor scale = scaling.scale().detach().to(at::kCPU, at::kFloat);
  out["scale_min"] = scale.min().item<double>();
  out["scale_max"] = scale.max().item<double>();
}

std::string percent(double fraction) { return fmt::format("{:.3g}%", 100.0 * fraction); }

// "h1.attn.c_proj:weight 0.0061% (step 40)" for the first entry of fp8_worst's list (the step
// when the summary has one), or "none".
std::string worst_text(const nlohmann::json& list) {
  if (list.empty() || list[0].at("fraction").get<double>() == 0.0) return "none";
  std::string text = list[0].at("slot").get<std::string>() + " " + percent(list[0].at("fraction").get<double>());
  if (list[0].contains("step")) text += fmt::format(" (step {})", list[0]["step"].get<int64_t>());
  return text;
}

}  // namespace

nlohmann::json fp8_summary(const TrainingJob& run, const Progress& progress) {
  const fp8::Scaling* scaling = run.scaling();
  if (!scaling) return nullptr;
  const fp8::Recipe& recipe = run.cfg.fp8;
  nlohmann::json out = {{"recipe", fp8::to_string(recipe.kind)},
                        {"format", fp8::to_string(recipe.fp8_format)},
                        {"emulated", !run.device.is_cuda()},
                        {"scaled_tensors", scaling->num_slots()}};
  if (const fp8::RewriteReport* report = run.session->rewrite()) add_linears(*report, out);
  add_scale_range(*scaling, out);
  if (recipe.stats) out["worst"] = worst_fp8_slots(progress.worst_fp8);
  return out;
}

std::string fp8_summary_line(const nlohmann::json& fp8) {
  if (!fp8.is_object()) return "";
  const std::string format = fp8.value("format", "") == "HYBRID" ? "HYBRID: E4M3 forward, E5M2 gradients"
                                                                  : fp8.value("format", "") + " everywhere";
  std::string s = fmt::format("fp8 ({} scaling, {}{}): ", fp8.value("recipe", ""), format,
                              fp8.value("emulated", false) ? "; emulated on the CPU" : "");
  if (fp8.contains("linears")) {
    s += fmt::format("{} of {} Linear layers", fp8["fp8_linears"].get<int64_t>(), fp8["linears"].get<int64_t>());
    if (fp8.contains("grouped")) {
      s += fmt::format(" and {} of {} grouped (experts) layers", fp8["fp8_grouped"].get<int64_t>(),
                       fp8["grouped"].get<int64_t>());
    }
    s += fmt::format(" in FP8 ({:.1f}% of the {}GEMM FLOPs", 100.0 * fp8["fp8_gemm_flops_share"].get<double>(),
                     fp8.contains("grouped") ? "" : "Linear ");
    std::string kept;
    for (const auto& name : fp8["kept_linears"]) kept += (kept.empty() ? "" : ", ") + name.get<std::string>();
    s += kept.empty() ? "), " : "; kept: " + kept + "), ";
  }
  s += fmt::format("{} scaled tensors", fp8.value("scaled_tensors", 0));
  if (fp8.contains("scale_min")) {
    s += fmt::format(", scales {:.3g} to {:.3g}", fp8["scale_min"].get<double>(), fp8["scale_max"].get<double>());
  }
  if (fp8.contains("worst")) {
    s += fmt::format("; most saturated {}, most underflow {}", worst_text(fp8["worst"]["most_saturated"]),
                     worst_text(fp8["worst"]["most_underflow"]));
  } else {
    s += "; saturation and underflow per tensor: add --fp8-stats";
  }
  return s;
}

}  // namespace fp8t::train
