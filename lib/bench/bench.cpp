#include "lib/bench/bench.h"

#include <spdlog/spdlog.h>                        // spdlog::info
#include <torch/csrc/autograd/profiler_kineto.h>  // torch::autograd::profiler (Kineto)
#include <torch/torch.h>                          // torch::cuda::synchronize

#include <algorithm>  // std::sort, std::max
#include <cmath>      // std::isfinite
#include <functional> // std::function
#include <map>        // std::map
#include <optional>   // std::optional
#include <set>        // std::set

#include "lib/config/fields.h"      // config::to_string
#include "lib/dist/communicator.h"  // dist::Communicator
#include "lib/model/model.h"        // model::Model::flops_per_token
#include "lib/step/session.h"       // Session
#include "lib/step/step_graph.h"    // StepGraph::kWarmupSteps
#include "lib/step/step_health.h"   // StepHealth (the skipped-step count)
#include "lib/train/trainer.h"      // resolve_device
#include "lib/util/error.h"         // FP8T_INPUT_CHECK
#include "lib/util/memory.h"        // peak_memory_bytes, resident_memory_bytes
#include "lib/util/timer.h"         // Stopwatch
#if defined(FP8T_WITH_CUDA)
#include "lib/gemm/gemm_engine.h"   // gemm::GemmEngine::tuning_log
#endif

namespace fp8t::bench {

namespace {

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// GEMM plans tuned so far in this process (train.gemm_autotune; 0 without CUDA).
size_t tuned_gemm_plans() {
#if defined(FP8T_WITH_CUDA)
  return gemm::GemmEngine::instance().tuning_log().size();
#else
  return 0;
#endif
}

// The plans tuned since `before` (the row's warm-up makes them), summed into the row.
void record_gemm_tuning(size_t before, BenchResult& r) {
#if defined(FP8T_WITH_CUDA)
  const std::vector<gemm::TuneRecord> log = gemm::GemmEngine::instance().tuning_log();
  for (size_t i = before; i < log.size(); ++i) {
    ++r.gemm_plans_tuned;
    if (log[i].chosen_rank != 0) ++r.gemm_plans_changed;
    r.gemm_heuristic_ms += log[i].heuristic_ms;
    r.gemm_chosen_ms += log[i].chosen_ms;
  }
#else
  (void)before;
  (void)r;
#endif
}

// Runs `steps` calls of run_step under the Kineto profiler and sums the duration of every GPU
// kernel (CUDA device) or CPU operator by name, per step.
std::vector<KernelTime> profile_kernels(const std::function<void()>& run_step, int64_t steps,
                                        const at::Device& device) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const std::set<ActivityType> activities =
      device.is_cuda() ? std::set<ActivityType>{ActivityType::CPU, ActivityType::CUDA}
                       : std::set<ActivityType>{ActivityType::CPU};
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  synchronize(device);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  for (int64_t i = 0; i < steps; ++i) run_step();
  synchronize(device);
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  const c10::DeviceType wanted = device.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  std::map<std::string, KernelTime> by_name;
  for (const auto& e : result->events()) {
    if (e.deviceType() != wanted || e.durationNs() == 0) continue;
    KernelTime& k = by_name[e.name()];
    k.ms_per_step += static_cast<double>(e.durationNs()) * 1e-6;
    k.calls_per_step += 1.0;
  }
  std::vector<KernelTime> out;
  for (auto& [name, k] : by_name) {
    k.name = name;
    k.ms_per_step /= static_cast<double>(steps);
    k.calls_per_step /= static_cast<double>(steps);
    out.push_back(k);
  }
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.ms_per_step > b.ms_per_step; });
  return out;
}

// Whether the session's last steps replayed its CUDA graph, and if not why.
void record_cuda_graph(const step::Session& session, BenchResult& r) {
  r.cuda_graph = session.cuda_graph_active();
  r.cuda_graph_off_reason = session.cuda_graph_off_reason();
  if (!r.cuda_graph && r.cuda_graph_off_reason.empty()) {
    r.cuda_graph_off_reason = "the steps ended before the capture, which follows " +
                              std::to_string(step::StepGraph::kWarmupSteps) + " eager steps";
  }
}

// One benchmarked configuration: a precision, and for fp8 under --recipes a recipe.
struct BenchRun {
  Precision precision;
  std::optional<fp8::RecipeKind> recipe;
};

// The runs in order: `precisions`, with the fp8 entry expanded into one run per recipe (fp8
// appended when --recipes is given without it).
std::vector<BenchRun> bench_runs(const BenchOptions& options) {
  std::vector<BenchRun> runs;
  bool fp8_done = false;
  auto add_fp8 = [&] {
    if (options.recipes.empty()) runs.push_back({Precision::kFp8, std::nullopt});
    for (fp8::RecipeKind k : options.recipes) runs.push_back({Precision::kFp8, k});
    fp8_done = true;
  };
  for (Precision p : options.precisions) {
    if (p != Precision::kFp8) {
      runs.push_back({p, std::nullopt});
    } else if (!fp8_done) {
      add_fp8();
    }
  }
  if (!fp8_done && !options.recipes.empty()) add_fp8();
  return runs;
}

// The config one benchmarked run trains: the base with the run's precision, recipe and micro-batches.
ExperimentConfig run_config(const ExperimentConfig& base, const BenchRun& run, const BenchOptions& options) {
  ExperimentConfig cfg = base;
  cfg.precision = run.precision;
  if (run.recipe) cfg.fp8.kind = *run.recipe;
  cfg.train.grad_accum_steps = options.micro_batches;
  return cfg;
}

// --breakdown: `steps` more steps with a mark after each phase (synchronizing there), each phase's
// median time and its memory peak above `baseline` into r; returns the largest of those peaks.
int64_t time_phases(step::Session& session, const std::function<data::Batch()>& next, double lr, at::Tensor& loss_sum,
                    int64_t steps, const at::Device& device, int64_t baseline, BenchResult& r) {
  std::vector<std::string> names;
  std::map<std::string, std::vector<double>> per_phase;
  std::map<std::string, int64_t> phase_peak;
  int64_t peak = 0;
  Stopwatch watch;
  for (int64_t i = 0; i < steps; ++i) {
    synchronize(device);
    reset_peak_memory(device);
    watch.lap();
    session.step(next, lr, loss_sum, [&](const char* name) {
      synchronize(device);
      const double t = watch.lap() * 1e3;
      if (per_phase.find(name) == per_phase.end()) names.emplace_back(name);
      per_phase[name].push_back(t);
      const int64_t bytes = peak_memory_bytes(device) - baseline;
      phase_peak[name] = std::max(phase_peak[name], bytes);
      peak = std::max(peak, bytes);
      reset_peak_memory(device);
    });
  }
  for (const auto& n : names) {
    r.phase_ms.emplace_back(n, median(per_phase[n]));
    r.phase_peak_bytes.emplace_back(n, phase_peak[n]);
  }
  return peak;
}

BenchResult bench_one(const ExperimentConfig& base, const BenchRun& run, const BenchOptions& options,
                      const at::Device& device, const std::shared_ptr<dist::Communicator>& comm) {
  const ExperimentConfig cfg = run_config(base, run, options);
  BenchResult r;
  r.precision = config::to_string(run.precision);
  if (run.recipe) r.recipe = fp8::to_string(*run.recipe);
  r.world_size = options.launch.world_size;
  r.tokens_per_step = cfg.train.micro_batch_size * cfg.model.seq_len * options.micro_batches * r.world_size;
  const ParallelLayout layout = ParallelLayout::of(cfg.dist, options.launch.rank, r.world_size);
  r.memory = plan::estimate_training_memory(cfg, layout);

  release_cached_memory(device);
  reset_peak_memory(device);
  // CPU: the row's peak counts what the row added to the resident set (LibTorch's code and what
  // the process holds anyway are left out), as the GPU's allocator peak does.
  const int64_t baseline = device.is_cpu() ? resident_memory_bytes() : 0;
  step::Session session(cfg, device, layout);
  session.prepare_training(comm);
  r.fp8_rewrite = session.rewrite_report();
  const double flops_per_token = session.model().flops_per_token();
  r.parameters = session.model().parameter_count();

  // One batch of random token ids on the device, reused by every micro-batch.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.run.seed + 1000003ULL * options.launch.rank);
  const at::Tensor tokens =
      at::randint(cfg.model.vocab_size, {cfg.train.micro_batch_size, cfg.model.seq_len + 1}, gen, at::kLong)
          .to(device);
  const data::Batch batch{tokens.narrow(1, 0, cfg.model.seq_len).contiguous(),
                          tokens.narrow(1, 1, cfg.model.seq_len).contiguous()};
  auto next = [&] { return batch; };
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  const double lr = cfg.train.lr;

  const size_t tuned_before = tuned_gemm_plans();
  for (int64_t i = 0; i < options.warmup; ++i) session.step(next, lr, loss_sum);
  synchronize(device);
  record_gemm_tuning(tuned_before, r);
  std::vector<double> ms;
  Stopwatch watch;
  for (int64_t i = 0; i < options.steps; ++i) {
    loss_sum.zero_();
    watch.lap();
    session.step(next, lr, loss_sum);
    synchronize(device);
    ms.push_back(watch.lap() * 1e3);
  }
  r.final_loss = loss_sum.item<double>() / static_cast<double>(options.micro_batches);
  record_cuda_graph(session, r);
  r.skipped_steps = session.health().read().skipped;  // warm-up and timed steps
  r.fp8_attention = session.fp8_attention_summary();   // after the steps: a refused shape shows
  // The row's peak so far (the breakdown below resets the allocator's peak at every phase).
  int64_t peak = peak_memory_bytes(device) - baseline;
  if (options.breakdown) peak = std::max(peak, time_phases(session, next, lr, loss_sum, options.steps, device, baseline, r));
  if (options.profile_steps > 0) {
    r.kernels = profile_kernels([&] { session.step(next, lr, loss_sum); }, options.profile_steps, device);
    for (const auto& k : r.kernels) r.profiled_device_ms_per_step += k.ms_per_step;
    r.profiled_gpu = device.is_cuda();
  }
  if (!std::isfinite(r.final_loss)) {
    FP8T_THROW(ExitCode::kTrainingFailed, "bench: the ", r.label(), " loss became ", r.final_loss,
               " (the benchmark repeats one random batch at train.lr; try a lower --set train.lr)");
  }
  r.median_step_ms = median(ms);
  r.min_step_ms = *std::min_element(ms.begin(), ms.end());
  r.max_step_ms = *std::max_element(ms.begin(), ms.end());
  r.tokens_per_s = static_cast<double>(r.tokens_per_step) / (r.median_step_ms * 1e-3);
  r.tflops = flops_per_token * r.tokens_per_s / 1e12;
  r.peak_memory_bytes = std::max(peak, peak_memory_bytes(device) - baseline);
  return r;
}

}  // namespace

std::vector<BenchResult> run_bench(const ExperimentConfig& cfg, const BenchOptions& options) {
  FP8T_INPUT_CHECK(!options.precisions.empty(), "bench: --precisions is empty");
  FP8T_INPUT_CHECK(options.steps >= 1, "bench: --bench-steps must be at least 1, got ", options.steps);
  FP8T_INPUT_CHECK(options.warmup >= 0, "bench: --bench-warmup must be non-negative, got ", options.warmup);
  FP8T_INPUT_CHECK(options.micro_batches >= 1, "bench: --micro-batches must be at least 1, got ",
                   options.micro_batches);
  const at::Device device = train::resolve_device(cfg.run.device, options.launch.local_rank);
  // Sizes that cannot fit stop here (exit 2, naming the keys), as in training: before any rank
  // builds a model or joins the rendezvous.
  for (const BenchRun& run : bench_runs(options)) {
    const ExperimentConfig run_cfg = run_config(cfg, run, options);
    plan::check_memory_fits(run_cfg, plan::device_memory_capacity(device), device.str(),
                            ParallelLayout::of(run_cfg.dist, options.launch.rank, options.launch.world_size));
  }
  std::shared_ptr<dist::Communicator> comm;
  if (options.launch.launched) {
    comm = dist::Communicator::connect(options.launch, device, std::chrono::seconds(cfg.dist.timeout_s));
    spdlog::info("bench: data-parallel over {} ranks ({}); figures are for the whole job", comm->world_size(),
                 comm->backend_name());
  }
  std::vector<BenchResult> results;
  for (const BenchRun& run : bench_runs(options)) {
    spdlog::info("bench: {}{} on {}: {} warm-up + {} timed steps", config::to_string(run.precision),
                 run.recipe ? std::string(":") + fp8::to_string(*run.recipe) : "", device.str(), options.warmup,
                 options.steps);
    results.push_back(bench_one(cfg, run, options, device, comm));
    const BenchResult& r = results.back();
    spdlog::info("bench: {}: {:.2f} ms/step, {:.0f} tokens/s, {:.1f} TFLOP/s", r.label(), r.median_step_ms,
                 r.tokens_per_s, r.tflops);
  }
  return results;
}

}  // namespace fp8t::bench
