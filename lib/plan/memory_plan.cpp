#include "lib/plan/memory_plan.h"

#include <fmt/format.h>  // fmt::format

#include <cmath>       // std::abs, std::isfinite
#include <cstdint>     // int64_t
#include <functional>  // std::function

#include "lib/config/fields.h"  // config::to_string
#include "lib/config/parallel_layout.h"  // ParallelLayout, ZeroStage
#include "lib/util/error.h"     // FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The most ranks a plan is for (more is not a cluster), and the most the "more ranks" lever tries.
constexpr int64_t kMaxPlannedRanks = int64_t{1} << 20;
constexpr int64_t kMaxLeverRanks = int64_t{1} << 24;
// A fit above this fraction of the device is called tight: the estimate is a lower bound, and
// the largest gap measured (+26%) would overflow the device from 1 / 1.26 = 0.79 of it on.
constexpr double kTightFraction = 0.8;

// Speed costs, from the README's measurements (the 1.3B config on H200s) where there are some.
constexpr const char* kZero1Cost = "a reduce-scatter + an all-gather instead of the all-reduce (0.974x DDP's tokens/s, 1.3B on 2 H200s)";
constexpr const char* kZero3Cost = "each unit's weights all-gathered for its forward and again for its backward (not measured yet)";
constexpr const char* kBf16MomentsCost =
    "3% faster (1.3B, H200, same call: 194.0 -> 188.2 ms); the moments rounded to bf16";
constexpr const char* kMicroBatchCost = "smaller GEMMs, fewer tokens/s; the same global batch";

const char* recompute_cost(Recompute r) {
  switch (r) {
    case Recompute::kCasts: return "+2.1 to +2.7% step time (LLaMA-1B, H100, same call)";
    case Recompute::kAttention: return "+11% step time (1.3B, H200)";
    case Recompute::kMlp: return "+16% step time (1.3B, H200)";
    case Recompute::kBlock: return "+26% step time (1.3B, H200): a second forward";
    default: break;
  }
  return "";
}

// Two decimals, or three significant digits below 1 GiB (a small model's figures are not all 0.00).
std::string gib(double bytes) {
  const double v = bytes / kGiB;
  return std::abs(v) >= 0.995 ? fmt::format("{:.2f}", v) : fmt::format("{:.3g}", v);
}

// A change to try: the config and the ranks it runs on.
struct Candidate {
  std::string setting;
  std::string cost;
  ExperimentConfig cfg;
  int world_size = 1;
};

// cfg.dist's layout on `world_size` ranks (the planner's figures are those of any rank).
ParallelLayout planned_layout(const ExperimentConfig& cfg, int world_size) {
  return ParallelLayout::of(cfg.dist, /*rank=*/0, world_size);
}

// The estimate of `cfg` on `world_size` of the target's devices (the attention scores counted
// where the device's attention path materialises them).
double total_on(const ExperimentConfig& cfg, int world_size, const PlanTarget& t) {
  return estimate_training_memory(cfg, planned_layout(cfg, world_size), attention_scores_on(cfg, t.device_name))
      .total_bytes();
}

bool fits(double bytes, const PlanTarget& t) { return t.device_bytes > 0 && bytes <= t.device_bytes; }

ExperimentConfig with(const ExperimentConfig& cfg, const std::function<void(ExperimentConfig&)>& change) {
  ExperimentConfig c = cfg;
  change(c);
  return c;
}

// dist.zero 1 and 3 (on 2 ranks when planning one), ZeRO-1 without accumulation, ZeRO-3's own keys.
void sharding_candidates(const ExperimentConfig& cfg, const PlanTarget& t, std::vector<Candidate>& out) {
  const int world = t.world_size > 1 ? t.world_size : 2;
  const std::string on = t.world_size > 1 ? "" : " on 2 ranks";
  const DistSection& d = cfg.dist;
  const ParallelLayout now = planned_layout(cfg, t.world_size);
  if (!now.shards_optimizer_state()) {
    out.push_back({"dist.zero 1" + on, kZero1Cost, with(cfg, [](auto& c) { c.dist.zero = ZeroStage::kOptimizer; }),
                   world});
  }
  if (!now.shards_weights()) {
    out.push_back({"dist.zero 3" + on, kZero3Cost, with(cfg, [](auto& c) { c.dist.zero = ZeroStage::kFull; }), world});
  }
  // ZeRO-1's full buckets persist over the micro-batches.
  if (now.shards_optimizer_state() && !now.shards_weights() && cfg.train.grad_accum_steps > 1) {
    out.push_back({"train.grad_accum_steps 1",
                   fmt::format("a {}x smaller global batch (more ranks or a larger micro-batch keep it)",
                               cfg.train.grad_accum_steps),
                   with(cfg, [](auto& c) { c.train.grad_accum_steps = 1; }), t.world_size});
  }
  if (!now.shards_weights()) return;  // ZeRO-3's own keys, on the planned ranks
  if (!d.reshard_after_forward) {
    out.push_back({"dist.reshard_after_forward true", "each unit gathered again for its backward",
                   with(cfg, [](auto& c) { c.dist.reshard_after_forward = true; }), t.world_size});
  }
  if (d.prefetch > 0) {
    out.push_back({"dist.prefetch 0", "the all-gathers no longer overlap compute",
                   with(cfg, [](auto& c) { c.dist.prefetch = 0; }), t.world_size});
  }
  if (d.reduce_dtype == ReduceDtype::kBf16) {
    out.push_back({"dist.reduce_dtype fp32", "twice the reduce-scatter bytes",
                   with(cfg, [](auto& c) { c.dist.reduce_dtype = ReduceDtype::kFp32; }), t.world_size});
  }
  if (d.shard_group_size > 0 && d.shard_group_size < t.world_size) {
    out.push_back({"dist.shard_group_size 0", "the all-gathers span all ranks, across nodes too",
                   with(cfg, [](auto& c) { c.dist.shard_group_size = 0; }), t.world_size});
  }
}

// train.micro_batch_size halved until the config fits (1 at the least), train.grad_accum_steps
// raised to keep the global batch.
Candidate micro_batch_candidate(const ExperimentConfig& cfg, const PlanTarget& t) {
  const int64_t now = cfg.train.micro_batch_size;
  ExperimentConfig c = cfg;
  for (int64_t m = now / 2; m >= 1; m /= 2) {
    c.train.micro_batch_size = m;
    c.train.grad_accum_steps = cfg.train.grad_accum_steps * ((now + m - 1) / m);
    if (fits(total_on(c, t.world_size, t), t) || m == 1 || t.device_bytes <= 0) break;
  }
  return {fmt::format("train.micro_batch_size {} (train.grad_accum_steps {})", c.train.micro_batch_size,
                      c.train.grad_accum_steps),
          kMicroBatchCost, c, t.world_size};
}

// The fewest ranks (the world doubled) on which the config fits; twice the world when none does.
Candidate ranks_candidate(const ExperimentConfig& cfg, const PlanTarget& t) {
  int64_t world = 2 * static_cast<int64_t>(t.world_size);
  while (t.device_bytes > 0 && world * 2 <= kMaxLeverRanks && !fits(total_on(cfg, static_cast<int>(world), t), t)) {
    world *= 2;
  }
  if (!fits(total_on(cfg, static_cast<int>(world), t), t)) world = 2 * static_cast<int64_t>(t.world_size);
  return {fmt::format("{} ranks", world), fmt::format("{} GPUs instead of {}", world, t.world_size), cfg,
          static_cast<int>(world)};
}

std::vector<Candidate> candidates(const ExperimentConfig& cfg, const PlanTarget& t) {
  std::vector<Candidate> out;
  sharding_candidates(cfg, t, out);
  // Recompute replays the forward, which dropout's masks forbid (validate.cpp).
  for (Recompute r : {Recompute::kCasts, Recompute::kAttention, Recompute::kMlp, Recompute::kBlock}) {
    if (r == cfg.train.recompute || (r != Recompute::kCasts && cfg.model.dropout > 0.0)) continue;
    if (r == Recompute::kCasts && cfg.precision != Precision::kFp8) continue;
    out.push_back({fmt::format("train.recompute {}", recompute_name(r)), recompute_cost(r),
                   with(cfg, [r](auto& c) { c.train.recompute = r; }), t.world_size});
  }
  if (cfg.train.moments_dtype == MomentsDtype::kFp32) {
    out.push_back({"train.moments_dtype bf16", kBf16MomentsCost,
                   with(cfg, [](auto& c) { c.train.moments_dtype = MomentsDtype::kBf16; }), t.world_size});
  }
  if (cfg.train.micro_batch_size > 1) out.push_back(micro_batch_candidate(cfg, t));
  if (planned_layout(cfg, t.world_size).shards_optimizer_state()) out.push_back(ranks_candidate(cfg, t));
  return out;
}

Lever evaluate(const Candidate& c, double base_bytes, const PlanTarget& t) {
  const double total = total_on(c.cfg, c.world_size, t);
  return {c.setting, c.cost, total, base_bytes - total, fits(total, t)};
}

// Every config change at its strongest (ZeRO-3, recompute block, bf16 moments, micro-batch 1).
Lever together(const ExperimentConfig& cfg, const PlanTarget& t, double base_bytes) {
  ExperimentConfig c = cfg;
  c.dist.zero = ZeroStage::kFull;
  c.dist.reshard_after_forward = true;
  if (c.model.dropout == 0.0) c.train.recompute = Recompute::kBlock;
  c.train.moments_dtype = MomentsDtype::kBf16;
  c.train.grad_accum_steps *= c.train.micro_batch_size;
  c.train.micro_batch_size = 1;
  const int world = t.world_size > 1 ? t.world_size : 2;
  return evaluate({fmt::format("all together: dist.zero 3, train.recompute {}, train.moments_dtype bf16, "
                               "train.micro_batch_size 1",
                               recompute_name(c.train.recompute)),
                   "the costs added up", c, world},
                  base_bytes, t);
}

void check_target(const ExperimentConfig& cfg, const PlanTarget& t) {
  FP8T_INPUT_CHECK(t.world_size >= 1 && t.world_size <= kMaxPlannedRanks, "the ranks planned for must be from 1 to ",
                   kMaxPlannedRanks, ", got ", t.world_size);
  FP8T_INPUT_CHECK(std::isfinite(t.device_bytes) && t.device_bytes >= 0, "the device memory planned for must be a "
                   "positive number of bytes, got ", t.device_bytes);
  const int64_t group = cfg.dist.shard_group_size;
  const bool shards_weights = planned_layout(cfg, t.world_size).shards_weights();
  FP8T_INPUT_CHECK(!shards_weights || group == 0 || (group <= t.world_size && t.world_size % group == 0),
                   "dist.shard_group_size ", group, " does not divide the ", t.world_size,
                   " ranks planned for (dist.zero 3 shards within groups of consecutive ranks); expected a divisor "
                   "of ", t.world_size, " or 0 (all ranks)");
}

}  // namespace

MemoryPlan plan_memory(const ExperimentConfig& cfg, const PlanTarget& target) {
  check_target(cfg, target);
  MemoryPlan plan{cfg, target,
                  estimate_training_memory(cfg, planned_layout(cfg, target.world_size),
                                           attention_scores_on(cfg, target.device_name)),
                  false, {}, std::nullopt};
  const double base = plan.estimate.total_bytes();
  plan.fits = fits(base, target);
  bool one_fits = false;
  for (const Candidate& c : candidates(cfg, target)) {
    Lever lever = evaluate(c, base, target);
    if (lever.saved_bytes <= 0) continue;
    one_fits = one_fits || lever.fits;
    plan.levers.push_back(std::move(lever));
  }
  if (!plan.fits && !one_fits && target.device_bytes > 0) plan.together = together(cfg, target, base);
  return plan;
}

namespace {

std::string sharding(const MemoryEstimate& e) {
  switch (e.layout.zero) {
    case ZeroStage::kOptimizer:
      return fmt::format("dist.zero 1 (ZeRO-1: AdamW moments and gradients sharded over {} ranks)", e.shard_ranks);
    case ZeroStage::kFull:
      return fmt::format("dist.zero 3 (ZeRO-3: weights, gradients and AdamW moments sharded over {} ranks)",
                         e.shard_ranks);
    case ZeroStage::kNone: break;
  }
  return "dist.zero 0 (DDP: every rank holds all the state)";
}

// "  weights (FP32 master, 4 / 16)        0.25     16.44"; an empty `per_param` for rows counted in bytes.
std::string row(const std::string& category, const std::string& per_param, const std::string& gib_cell) {
  return fmt::format("  {:<68}{:>12}{:>10}\n", category, per_param, gib_cell);
}

std::string per_param_rows(const ExperimentConfig& cfg, const MemoryEstimate& e) {
  const ParallelLayout& l = e.layout;
  const std::string over = l.shards_optimizer_state() ? fmt::format(" / {}", e.shard_ranks) : "";
  const bool bf16_moments = cfg.train.moments_dtype == MomentsDtype::kBf16;
  auto param_row = [&](const std::string& name, double per_param) {
    return row(name, fmt::format("{:.3g}", per_param), gib(per_param * e.parameters));
  };
  std::string s = param_row(l.shards_weights() ? "weights (FP32 master, 4" + over + ")" : "weights (FP32 master)",
                            e.weight_bytes_per_param);
  s += param_row(!l.shards_gradients() ? "gradients (FP32)" : "gradients (FP32 shard, 4" + over + ")",
                 e.grad_bytes_per_param);
  const std::string moments = l.shards_optimizer_state() ? (bf16_moments ? ", 4" : ", 8") + over : "";
  s += param_row(fmt::format("AdamW moments ({}{})", bf16_moments ? "bf16" : "FP32", moments),
                 e.optimizer_bytes_per_param);
  if (e.fp8_bytes_per_param > 0) {
    s += param_row(cfg.precision == Precision::kFp8 ? "FP8 weight copies (E4M3 + transpose of the block Linears)"
                                                    : "autocast weight copies (2 bytes per Linear weight)",
                   e.fp8_bytes_per_param);
  }
  return s;
}

std::string byte_rows(const ExperimentConfig& cfg, const MemoryEstimate& e) {
  std::string s;
  if (e.gradient_bucket_bytes > 0) {
    s += row(e.layout.shards_weights()
                 ? fmt::format("full gradients of 2 units (FP32{})",
                               cfg.dist.reduce_dtype == ReduceDtype::kBf16 ? " + their bf16 copy" : "")
                 : "full gradient buckets in use",
             "", gib(e.gradient_bucket_bytes));
  }
  if (e.gathered_weight_bytes > 0) {
    s += row(cfg.dist.reshard_after_forward
                 ? fmt::format("gathered weights of {} units (the one computing + dist.prefetch {})", e.gathered_units,
                               cfg.dist.prefetch)
                 : fmt::format("gathered weights of all {} units (dist.reshard_after_forward false)", e.gathered_units),
             "", gib(e.gathered_weight_bytes));
  }
  if (e.head_gradient_bytes > 0) s += row("the chunked head's FP32 weight gradient", "", gib(e.head_gradient_bytes));
  if (e.attention_score_bytes > 0) {
    s += row(fmt::format("attention scores (math path, model.dropout {:g}: {} x [B, H, T, T])", cfg.model.dropout,
                         3 * cfg.model.n_layer + 1),
             "", gib(e.attention_score_bytes));
  }
  s += row(fmt::format("activations of one micro-batch (train.recompute {})", recompute_name(cfg.train.recompute)), "",
           gib(e.activation_bytes));
  if (e.moe_transient_bytes > 0) {
    s += row("one MoE block's transient buffers (dispatch, or experts' wgrad)", "", gib(e.moe_transient_bytes));
  }
  return s;
}

// "6.919e+09 parameters": a mixture of experts adds the whole model's and the active ones, and
// this rank's share under dist.expert_parallel.
std::string parameters_text(const ExperimentConfig& cfg, const MemoryEstimate& e) {
  if (!cfg.model.moe.enabled()) return fmt::format("{:.4g} parameters", e.parameters);
  std::string s = fmt::format("{:.4g} parameters ({:.4g} active per token: top-{} of {} experts)", e.total_parameters,
                              e.active_parameters, cfg.model.moe.top_k, cfg.model.moe.experts);
  if (e.parameters < e.total_parameters) s += fmt::format(", {:.4g} on each rank (dist.expert_parallel)", e.parameters);
  return s;
}

std::string verdict(const MemoryPlan& plan) {
  const double total = plan.estimate.total_bytes(), device = plan.target.device_bytes;
  if (plan.fits) {
    // Measured peaks: 5% (8B, ZeRO-1, 2 x H200) to 26% (1.3B, DDP, 2 H200s) above this estimate; on one
    // H200 (8B at sequence 8192, 3B) the fp8 peaks were 1 to 5% below it (docs/benchmarks.md).
    const char* tight = total > kTightFraction * device ? "; tight: measured peaks have run from 5% below to 26% above the estimate"
                                                        : "";
    return fmt::format("verdict: fits: {} GiB per rank of {} GiB ({} GiB free{})\n", gib(total), gib(device),
                       gib(device - total), tight);
  }
  return fmt::format("verdict: does not fit: {} GiB per rank, {} GiB per device ({} GiB over)\n", gib(total),
                     gib(device), gib(total - device));
}

std::string lever_table(const MemoryPlan& plan) {
  std::string s = "levers, each alone (GiB per rank):\n";
  s += fmt::format("  {:<56}{:>9}{:>9}  {:<14}{}\n", "setting", "saves", "total", "verdict", "speed");
  for (const Lever& l : plan.levers) {
    s += fmt::format("  {:<56}{:>9}{:>9}  {:<14}{}\n", l.setting, gib(l.saved_bytes), gib(l.total_bytes),
                     l.fits ? "fits" : "does not fit", l.cost);
  }
  if (plan.levers.empty()) s += "  (none saves memory here)\n";
  if (plan.together) {
    s += fmt::format("no lever alone is enough; {}: {} GiB per rank, {}\n", plan.together->setting,
                     gib(plan.together->total_bytes), plan.together->fits ? "fits" : "does not fit either");
  }
  return s;
}

}  // namespace

std::string format_memory_plan(const MemoryPlan& plan) {
  const ExperimentConfig& cfg = plan.cfg;
  const MemoryEstimate& e = plan.estimate;
  std::string s = fmt::format("memory per rank on {} x {}: {}, precision {}\n", plan.target.world_size,
                              plan.target.device_name, sharding(e), config::to_string(cfg.precision));
  s += fmt::format("{}, micro-batch {} x {} tokens; a lower bound (lib/plan/resources.h: "
                   "workspaces and allocator slack left out)\n",
                   parameters_text(cfg, e), cfg.train.micro_batch_size, cfg.model.seq_len);
  s += row("category", "bytes/param", "GiB");
  s += per_param_rows(cfg, e);
  s += byte_rows(cfg, e);
  s += row("total (bytes/param: of the rows that have one)", fmt::format("{:.3g}", e.state_bytes_per_param()),
           gib(e.total_bytes()));
  if (plan.target.device_bytes <= 0) return s;
  s += verdict(plan);
  if (!plan.fits) s += lever_table(plan);
  return s;
}

std::string format_levers(const MemoryPlan& plan) {
  std::string out = "Levers (each alone, per rank):";
  const char* sep = " ";
  for (const Lever& l : plan.levers) {
    const char* says = plan.target.device_bytes <= 0 ? "" : l.fits ? ", fits" : ", not enough alone";
    out += fmt::format("{}{}: {} GiB less ({}{})", sep, l.setting, gib(l.saved_bytes), l.cost, says);
    sep = "; ";
  }
  if (plan.together) {
    out += fmt::format("; {}: {} GiB per rank ({})", plan.together->setting, gib(plan.together->total_bytes),
                       plan.together->fits ? "fits" : "does not fit either");
  }
  if (plan.levers.empty()) out += " none of dist.zero, train.recompute, train.moments_dtype, train.micro_batch_size or more ranks saves memory here";
  return out;
}

void print_memory_plan(const ExperimentConfig& cfg, const PlanTarget& target, std::ostream& out) {
  const MemoryPlan plan = plan_memory(cfg, target);
  out << format_memory_plan(plan) << std::flush;
  if (plan.fits) return;
  FP8T_THROW(ExitCode::kBadInput, "the config does not fit on ", target.world_size, " x ", target.device_name, ": ",
             gib(plan.estimate.total_bytes()), " GiB per rank (a lower bound) against ", gib(target.device_bytes),
             " GiB; the levers are listed above");
}

}  // namespace fp8t::plan
