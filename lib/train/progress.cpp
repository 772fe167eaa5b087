#include "lib/train/progress.h"

#include <spdlog/spdlog.h>  // spdlog::warn

#include <algorithm>  // std::sort, std::max
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "lib/config/fields.h"   // config::to_string
#include "lib/model/gpt.h"       // model::Gpt
#include "lib/train/run_setup.h"  // Run
#include "lib/util/memory.h"     // peak_memory_bytes

namespace fp8t::train {

namespace {

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The slots with the largest saturation and underflow fractions seen over the run.
nlohmann::json worst_offenders(const nlohmann::json& worst_by_slot) {
  std::vector<std::pair<double, std::string>> sat, under;
  for (const auto& [slot, v] : worst_by_slot.items()) {
    sat.emplace_back(v.at("saturated").get<double>(), slot);
    under.emplace_back(v.at("underflow").get<double>(), slot);
  }
  auto top = [](std::vector<std::pair<double, std::string>> v) {
    std::sort(v.rbegin(), v.rend());
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < v.size() && i < 5; ++i) out.push_back({{"slot", v[i].second}, {"fraction", v[i].first}});
    return out;
  };
  return {{"most_saturated", top(sat)}, {"most_underflow", top(under)}};
}

}  // namespace

nlohmann::json Progress::checkpoint_meta() const {
  return {{"best_val_loss", optional_json(best_val)}, {"tokens", tokens}, {"elapsed_s", elapsed_s()},
          {"skipped_steps", skipped_steps}};
}

void Progress::restore(const nlohmann::json& meta, int64_t at_step) {
  start_step = step = at_step;
  if (meta.contains("tokens")) tokens = meta["tokens"].get<int64_t>();
  if (meta.contains("elapsed_s")) elapsed_before = meta["elapsed_s"].get<double>();
  if (meta.contains("skipped_steps")) skipped_steps = meta["skipped_steps"].get<int64_t>();
  if (meta.contains("best_val_loss") && !meta["best_val_loss"].is_null()) {
    best_val = meta["best_val_loss"].get<double>();
  }
}

void Progress::record_eval(double val_loss) {
  last_val = val_loss;
  if (!best_val || val_loss < *best_val) best_val = val_loss;
}

void Progress::record_fp8_stats(const nlohmann::json& rows) {
  for (const auto& s : rows) {
    auto& w = worst_fp8[s["slot"].get<std::string>()];
    if (w.is_null()) w = {{"saturated", 0.0}, {"underflow", 0.0}};
    w["saturated"] = std::max(w.value("saturated", 0.0), s["saturated"].get<double>());
    w["underflow"] = std::max(w.value("underflow", 0.0), s["underflow"].get<double>());
  }
}

void Progress::record_scale_spread(double spread, int64_t at_step, bool expect_identical) {
  if (expect_identical && spread != 0.0 && max_scale_spread == 0.0) {
    spdlog::warn("fp8: the ranks use different scales at step {} (largest difference {}); the amax "
                 "reduction is not working", at_step, spread);
  }
  max_scale_spread = std::max(max_scale_spread, spread);
}

nlohmann::json Progress::summary(const Run& run) const {
  const double wall_s = wall.seconds();
  nlohmann::json out = {
      {"status", status},
      {"run", run.cfg.run.name},
      {"precision", config::to_string(run.cfg.precision)},
      {"device", run.device.str()},
      {"world_size", run.world_size},
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
  if (run.scaling() && run.cfg.fp8.stats) out["fp8_worst"] = worst_offenders(worst_fp8);
  if (run.scaling() && run.comm) out["fp8_max_scale_spread_across_ranks"] = max_scale_spread;
  return out;
}

nlohmann::json Progress::failure_summary(const std::string& error) const {
  nlohmann::json out = {
      {"status", status}, {"steps", in_loop ? step + 1 : step}, {"error", error}, {"skipped_steps", skipped_steps}};
  if (diverged_at > 0) out["diverged_at_step"] = diverged_at;
  return out;
}

}  // namespace fp8t::train
