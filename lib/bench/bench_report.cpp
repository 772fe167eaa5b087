// `fp8train bench`'s output: the table printed to the console and the JSON of the results
// (lib/bench/bench.h); the measurement itself is bench.cpp.
#include "lib/bench/bench.h"

#include <algorithm>  // std::min, std::max
#include <iomanip>    // std::setw
#include <sstream>    // std::ostringstream

#include "lib/config/parallel_layout.h"  // ZeroStage, zero_level
#include "lib/util/versions.h"  // runtime_versions, fp8train_version

namespace fp8t::bench {

namespace {

// A kernel name short enough for a table row, written to `out`: no return type, no argument
// list, at most `width` characters. (Written, not returned: GCC 12 reports a false
// -Warray-bounds for the returned string once this is inlined into the table.)
void write_kernel_name(std::ostream& out, std::string name, size_t width) {
  if (name.rfind("void ", 0) == 0) name = name.substr(5);
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name.compare(i, 21, "(anonymous namespace)") == 0) {
      i += 20;  // part of a qualified name, not the argument list
      continue;
    }
    if (name[i] == '(' && depth == 0 && i > 0) {
      name = name.substr(0, i);
      break;
    }
  }
  if (name.size() <= width) {
    out << name;
  } else {
    out.write(name.data(), static_cast<std::streamsize>(width - 3)) << "...";
  }
}

// Whether each row's timed steps replayed a CUDA graph: one statement when all rows agree.
std::string cuda_graphs_line(const std::vector<BenchResult>& results) {
  if (results.empty()) return "";
  const BenchResult& first = results.front();
  bool same = true;
  for (const auto& r : results) {
    same = same && r.cuda_graph == first.cuda_graph && r.cuda_graph_off_reason == first.cuda_graph_off_reason;
  }
  const std::string every = results.size() > 1 ? " in every row" : "";
  // Appended piece by piece: GCC 12 reports a false -Wstringop-overflow for `"literal" + f()`.
  auto append_state = [&](std::string& line, const BenchResult& r, const std::string& where) {
    line += r.cuda_graph ? "replayed" : "eager";
    line += where;
    if (!r.cuda_graph && !r.cuda_graph_off_reason.empty()) {
      line += ": ";
      line += r.cuda_graph_off_reason;
    }
  };
  std::string line = "CUDA graphs:";
  if (same) {
    line += ' ';
    append_state(line, first, every);
    return line + '\n';
  }
  for (const auto& r : results) {
    line += ' ';
    line += r.label();
    line += ' ';
    append_state(line, r, "");
    line += ';';
  }
  line.back() = '\n';
  return line;
}

// The row named `label` ("bf16", "fp8", "fp8:delayed").
const BenchResult* find(const std::vector<BenchResult>& results, const std::string& label) {
  for (const auto& r : results) {
    if (r.label() == label) return &r;
  }
  return nullptr;
}

// "  1.234x" (ratio of tokens/s) or "-" when there is no reference row, right-aligned in `width`.
std::string ratio_cell(const BenchResult& r, const BenchResult* ref, int width) {
  std::ostringstream s;
  if (ref && ref->tokens_per_s > 0) {
    s << std::fixed << std::setprecision(3) << std::setw(width - 1) << r.tokens_per_s / ref->tokens_per_s << "x";
  } else {
    s << std::setw(width) << "-";
  }
  return s.str();
}

// Tokens/s of every recipe row over the reference row, by recipe (JSON).
nlohmann::json recipe_ratios(const std::vector<BenchResult>& results, const BenchResult* ref) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& r : results) {
    if (!r.recipe.empty() && ref && ref->tokens_per_s > 0) out[r.recipe] = r.tokens_per_s / ref->tokens_per_s;
  }
  return out;
}

std::string describe_model(const ExperimentConfig& cfg, int64_t parameters) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << parameters / 1e6 << "M params (" << cfg.model.n_layer << " layers, d_model "
    << cfg.model.d_model << ", " << cfg.model.n_head << " heads, seq " << cfg.model.seq_len << ", vocab "
    << cfg.model.vocab_size << ")";
  return s.str();
}

// The estimate per rank (lib/plan/resources.h) by category, next to the measured peak.
std::string memory_section(const ExperimentConfig& cfg, const std::vector<BenchResult>& results) {
  constexpr double kGiB = 1073741824.0;
  std::ostringstream s;
  s << "\nmemory per rank, estimated (bytes/parameter; lib/plan/resources.h, a lower bound), against the measured "
       "peak:\n";
  s << std::left << std::setw(10) << "precision" << std::right << std::setw(9) << "weights" << std::setw(7) << "grads"
    << std::setw(11) << "optimizer" << std::setw(11) << "wt copies" << std::setw(8) << "total" << std::setw(11)
    << "state GiB" << std::setw(15) << "transient GiB" << std::setw(17) << "activations GiB" << std::setw(14)
    << "estimate GiB" << std::setw(10) << "peak GiB" << std::setw(16) << "peak/estimate" << "\n";
  for (const auto& r : results) {
    const plan::MemoryEstimate& m = r.memory;
    const double estimate = m.total_bytes();
    const double transient = estimate - m.state_bytes - m.activation_bytes;  // every term that comes and goes
    s << std::left << std::setw(10) << r.label() << std::right << std::fixed << std::setprecision(2) << std::setw(9)
      << m.weight_bytes_per_param << std::setw(7) << m.grad_bytes_per_param << std::setw(11)
      << m.optimizer_bytes_per_param << std::setw(11) << m.fp8_bytes_per_param << std::setw(8)
      << m.state_bytes_per_param() << std::setw(11) << m.state_bytes / kGiB << std::setw(15)
      << transient / kGiB << std::setw(17) << m.activation_bytes / kGiB
      << std::setw(14) << estimate / kGiB << std::setw(10) << r.peak_memory_bytes / kGiB << std::setw(16)
      << (estimate > 0 ? static_cast<double>(r.peak_memory_bytes) / estimate : 0.0) << "\n";
  }
  s << "wt copies: the FP8 weights' E4M3 copy + transpose (fp8), autocast's 2-byte copies (bf16, fp16); transient: "
       "the chunked head's FP32 weight gradient (bf16, fp8), ZeRO-3's gathered units, the math path's attention "
       "scores, one MoE block's dispatch buffers or experts' weight gradient\n";
  const plan::MemoryEstimate* first = results.empty() ? nullptr : &results.front().memory;
  if (first != nullptr && cfg.dist.zero == ZeroStage::kOptimizer) {
    s << "dist.zero 1: the AdamW moments and the FP32 gradients are sharded over " << first->shard_ranks
      << " ranks (ZeRO-1); state GiB includes the full gradient buckets in use at once: " << std::setprecision(2)
      << first->gradient_bucket_bytes / kGiB << " GiB\n";
  }
  if (first != nullptr && cfg.dist.zero == ZeroStage::kFull) {
    s << "dist.zero 3: weights, gradients and AdamW moments sharded over " << first->shard_ranks
      << " ranks (ZeRO-3); state GiB includes the full gradients of 2 units (" << std::setprecision(2)
      << first->gradient_bucket_bytes / kGiB << " GiB); transient the gathered weights of " << first->gathered_units
      << " units (" << first->gathered_weight_bytes / kGiB << " GiB)\n";
  }
  return s.str();
}

}  // namespace

std::string format_bench_table(const ExperimentConfig& cfg, const BenchOptions& options,
                               const std::vector<BenchResult>& results) {
  std::ostringstream s;
  const int64_t tokens = results.empty() ? 0 : results.front().tokens_per_step;
  s << "model: " << describe_model(cfg, results.empty() ? 0 : results.front().parameters) << "\n"
    << "step:  " << options.micro_batches << " x " << cfg.train.micro_batch_size << " x " << cfg.model.seq_len
    << (results.empty() || results.front().world_size == 1 ? "" : " x " + std::to_string(results.front().world_size) + " ranks")
    << " = " << tokens << " tokens; median of " << options.steps << " steps after " << options.warmup
    << " warm-up\n\n";
  const bool recipes = !options.recipes.empty();
  s << std::left << std::setw(recipes ? 14 : 10) << "precision" << std::right << std::setw(12) << "step ms"
    << std::setw(14) << "tokens/s" << std::setw(10) << "TFLOP/s" << std::setw(14) << "peak GiB" << std::setw(10)
    << "vs bf16" << (recipes ? "  vs delayed" : "") << std::setw(12) << "loss" << std::setw(9) << "skipped" << "\n";
  const BenchResult* bf16 = find(results, "bf16");
  const BenchResult* delayed = find(results, "fp8:delayed");
  for (const auto& r : results) {
    s << std::left << std::setw(recipes ? 14 : 10) << r.label() << std::right << std::fixed << std::setprecision(2)
      << std::setw(12) << r.median_step_ms << std::setprecision(0) << std::setw(14) << r.tokens_per_s
      << std::setprecision(1) << std::setw(10) << r.tflops << std::setprecision(2) << std::setw(14)
      << r.peak_memory_bytes / 1073741824.0 << ratio_cell(r, bf16, 10);
    if (recipes) s << ratio_cell(r, r.recipe.empty() ? nullptr : delayed, 12);
    s << std::setw(12) << std::setprecision(4) << r.final_loss << std::setw(9) << r.skipped_steps << "\n";
  }
  s << cuda_graphs_line(results);
  for (const auto& r : results) {
    if (!r.fp8_attention.empty()) s << "fp8.attention (" << r.label() << "): " << r.fp8_attention << "\n";
  }
  for (const auto& r : results) {
    if (r.gemm_plans_tuned == 0) continue;
    s << "GEMM autotune (" << r.label() << "): " << r.gemm_plans_tuned << " plans timed, " << r.gemm_plans_changed
      << " kept another algorithm than the heuristic's first; one call of each: " << std::setprecision(3)
      << r.gemm_heuristic_ms << " ms with the heuristic's choices, " << r.gemm_chosen_ms << " ms tuned ("
      << std::showpos << std::setprecision(1) << 100.0 * (r.gemm_chosen_ms / r.gemm_heuristic_ms - 1.0)
      << std::noshowpos << "%)\n";
  }
  s << memory_section(cfg, results);
  for (const auto& r : results) {
    if (r.phase_ms.empty()) continue;
    s << "\n" << r.label() << " phases (median ms, synchronized after each):";
    for (const auto& [name, ms] : r.phase_ms) s << " " << name << " " << std::setprecision(2) << ms;
    s << "\n" << r.label() << " phases' memory peaks (GiB, the largest over the steps):";
    for (const auto& [name, bytes] : r.phase_peak_bytes) {
      s << " " << name << " " << std::setprecision(2) << static_cast<double>(bytes) / 1073741824.0;
    }
    s << "\n";
  }
  for (const auto& r : results) {
    if (r.kernels.empty()) continue;
    s << "\n" << r.label() << (r.profiled_gpu ? " GPU kernels" : " CPU operators (inclusive: nested operators overlap)")
      << ", per step (" << options.profile_steps << " profiled steps; " << std::setprecision(2)
      << r.profiled_device_ms_per_step << " ms in total):\n";
    s << std::right << std::setw(10) << "ms" << std::setw(8) << "%" << std::setw(8) << "calls" << "  "
      << std::left << "name\n";
    const size_t shown = std::min<size_t>(r.kernels.size(), 30);
    for (size_t i = 0; i < shown; ++i) {
      const KernelTime& k = r.kernels[i];
      s << std::right << std::setw(10) << std::setprecision(3) << k.ms_per_step << std::setw(8) << std::setprecision(1)
        << 100.0 * k.ms_per_step / std::max(r.profiled_device_ms_per_step, 1e-12) << std::setw(8)
        << std::setprecision(0) << k.calls_per_step << "  " << std::left;
      write_kernel_name(s, k.name, 110);
      s << "\n";
    }
    if (r.kernels.size() > shown) s << "  ... " << r.kernels.size() - shown << " more in the JSON\n";
  }
  return s.str();
}

// One row of the JSON's "results".
nlohmann::json result_json(const BenchResult& r, const BenchOptions& options) {
  nlohmann::json row = {{"precision", r.precision},
                        {"tokens_per_step", r.tokens_per_step},
                        {"median_step_ms", r.median_step_ms},
                        {"min_step_ms", r.min_step_ms},
                        {"max_step_ms", r.max_step_ms},
                        {"tokens_per_s", r.tokens_per_s},
                        {"model_tflops", r.tflops},
                        {"peak_memory_bytes", r.peak_memory_bytes},
                        {"final_loss", r.final_loss},
                        {"skipped_steps", r.skipped_steps},
                        {"cuda_graph", r.cuda_graph},
                        {"memory_estimate",
                         {{"bytes_per_parameter",
                           {{"weights", r.memory.weight_bytes_per_param},
                            {"gradients", r.memory.grad_bytes_per_param},
                            {"optimizer", r.memory.optimizer_bytes_per_param},
                            {"weight_copies", r.memory.fp8_bytes_per_param},
                            {"total", r.memory.state_bytes_per_param()}}},
                          {"parameters", r.memory.parameters},
                          {"gradient_bucket_bytes", r.memory.gradient_bucket_bytes},
                          {"state_bytes", r.memory.state_bytes},
                          {"shard_ranks", r.memory.shard_ranks},
                          {"gathered_weight_bytes", r.memory.gathered_weight_bytes},
                          {"head_gradient_bytes", r.memory.head_gradient_bytes},
                          {"attention_score_bytes", r.memory.attention_score_bytes},
                          {"moe_transient_bytes", r.memory.moe_transient_bytes},
                          {"activation_bytes", r.memory.activation_bytes},
                          {"total_bytes", r.memory.total_bytes()}}}};
  if (!r.recipe.empty()) row["recipe"] = r.recipe;
  if (!r.fp8_rewrite.empty()) row["fp8_rewrite"] = r.fp8_rewrite;
  if (!r.fp8_attention.empty()) row["fp8_attention"] = r.fp8_attention;
  if (!r.cuda_graph_off_reason.empty()) row["cuda_graph_off_reason"] = r.cuda_graph_off_reason;
  if (r.gemm_plans_tuned > 0) {
    row["gemm_autotune"] = {{"plans_tuned", r.gemm_plans_tuned},
                            {"plans_changed", r.gemm_plans_changed},
                            {"heuristic_ms", r.gemm_heuristic_ms},
                            {"chosen_ms", r.gemm_chosen_ms}};
  }
  if (!r.phase_ms.empty()) {
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [name, ms] : r.phase_ms) phases[name] = ms;
    row["phase_ms"] = phases;
    nlohmann::json peaks = nlohmann::json::object();
    for (const auto& [name, bytes] : r.phase_peak_bytes) peaks[name] = bytes;
    row["phase_peak_bytes"] = peaks;
  }
  if (!r.kernels.empty()) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& k : r.kernels) {
      kernels.push_back({{"name", k.name}, {"ms_per_step", k.ms_per_step}, {"calls_per_step", k.calls_per_step}});
    }
    row["profile"] = {{"steps", options.profile_steps},
                      {"device_ms_per_step", r.profiled_device_ms_per_step},
                      {"kernels", kernels}};
  }
  return row;
}

nlohmann::json bench_to_json(const ExperimentConfig& cfg, const BenchOptions& options,
                             const std::vector<BenchResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) rows.push_back(result_json(r, options));
  const BenchResult* bf16 = find(results, "bf16");
  const BenchResult* fp8 = find(results, "fp8");
  nlohmann::json out = {
      {"versions", runtime_versions()},
      {"fp8train", fp8train_version()},
      {"model", {{"n_layer", cfg.model.n_layer}, {"d_model", cfg.model.d_model}, {"n_head", cfg.model.n_head},
                 {"seq_len", cfg.model.seq_len}, {"vocab_size", cfg.model.vocab_size},
                 {"parameters", results.empty() ? 0 : results.front().parameters}}},
      {"micro_batch_size", cfg.train.micro_batch_size},
      {"world_size", options.launch.world_size},
      {"zero", zero_level(cfg.dist.zero)},
      {"micro_batches_per_step", options.micro_batches},
      {"timed_steps", options.steps},
      {"warmup_steps", options.warmup},
      {"flops_per_token_formula",
       "6 * non-embedding params (a mixture of experts: those a token passes through) + 12 * n_layer * seq_len * d_model"},
      {"results", rows},
  };
  if (bf16 && fp8 && bf16->tokens_per_s > 0) out["fp8_over_bf16"] = fp8->tokens_per_s / bf16->tokens_per_s;
  if (!options.recipes.empty()) {  // --recipes: every recipe against delayed and against bf16
    out["recipe_over_delayed"] = recipe_ratios(results, find(results, "fp8:delayed"));
    out["recipe_over_bf16"] = recipe_ratios(results, bf16);
  }
  const BenchResult* fp16 = find(results, "fp16");
  if (bf16 && fp16 && bf16->tokens_per_s > 0) out["fp16_over_bf16"] = fp16->tokens_per_s / bf16->tokens_per_s;
  return out;
}

}  // namespace fp8t::bench
