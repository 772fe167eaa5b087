// `fp8train bench`: training-step throughput of one model config in several precisions,
// side by side, on synthetic tokens (random ids, drawn once and reused: the data pipeline is
// not part of the measurement).
//
// Per precision: build the model (and the FP8 rewrite; for fp16 the dynamic loss scaler), run
// `warmup` optimizer steps untimed (cuBLASLt plans, allocator, autotuning; with CUDA graphs the
// capture, after StepGraph::kWarmupSteps of them), then `steps` timed steps, each ended by a
// device synchronize; report the median. Every step is a full training
// step: forward and backward of `micro_batches` micro-batches, FP8 scale update, clipping and
// AdamW (fp16: with the loss scaled, and the unscale folded into AdamW).
//
// Model FLOPs per token (lib/model/model.h, Model::flops_per_token; the GPT family's formula):
//   6 * N  +  12 * n_layer * seq_len * d_model
// N = parameters outside the embeddings (the GEMM weights, plus the tied output head counted
// once as a GEMM), 6 = 2 forward + 4 backward per weight; the second term is the attention
// scores and values (QK^T and AV, 2 * 2 * T * d per layer forward, x3 with the backward), with
// no discount for causal masking (the PaLM convention, as nanoGPT and llm.c report MFU).
// TFLOP/s = FLOPs per token * tokens/s / 1e12.
//
// Memory: the measured peak per rank, and the estimate of lib/plan/resources.h per rank
// (bytes per parameter: weights, gradients, AdamW moments (divided by the ranks with dist.zero 1),
// FP8 weight copies; activations of one micro-batch). Under torchrun with --zero 1 the optimizer
// state is sharded as in training.
#pragma once

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstdint>  // int64_t
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig, Precision
#include "lib/dist/launch.h"        // dist::LaunchInfo
#include "lib/plan/resources.h"     // MemoryEstimate

namespace fp8t::bench {

struct BenchOptions {
  std::vector<Precision> precisions = {Precision::kBf16, Precision::kFp8};  // any of fp32, bf16, fp16, fp8
  // FP8 scaling recipes to compare: the fp8 entry of `precisions` runs once per recipe (one row
  // each, "fp8:current"); fp8 is added after the others when `precisions` lacks it. Empty: the
  // config's fp8.recipe, one row "fp8".
  std::vector<fp8::RecipeKind> recipes;
  int64_t steps = 20;         // timed optimizer steps per precision
  int64_t warmup = 5;         // untimed steps first
  int64_t micro_batches = 1;  // micro-batches per optimizer step (replaces train.grad_accum_steps)
  // Under torchrun: every rank runs the same steps on its own random tokens with gradients
  // averaged across ranks; tokens/s and TFLOP/s are then for the whole job (all GPUs).
  dist::LaunchInfo launch;
  // Also time the phases of a step (forward, loss, backward, grad_sync, fp8_update, clip,
  // optimizer) over `steps` more steps, with a device synchronize after each phase, and take
  // each phase's memory peak.
  bool breakdown = false;
  // Also profile `profile_steps` more steps (LibTorch's Kineto profiler) and report the time of
  // every GPU kernel per step (CPU: every operator, inclusive of the ones it calls). 0: off.
  int64_t profile_steps = 0;
};

// Time of one kernel (GPU) or operator (CPU) per profiled step, summed over its calls.
struct KernelTime {
  std::string name;
  double ms_per_step = 0;
  double calls_per_step = 0;
};

struct BenchResult {
  std::string precision;
  std::string recipe;               // the FP8 recipe of an fp8 row under --recipes, else ""
  // The row's name: the precision, or "fp8:<recipe>" under --recipes.
  std::string label() const { return recipe.empty() ? precision : precision + ":" + recipe; }
  int world_size = 1;
  int64_t parameters = 0;
  int64_t tokens_per_step = 0;
  double median_step_ms = 0;
  double min_step_ms = 0;
  double max_step_ms = 0;
  double tokens_per_s = 0;
  double tflops = 0;                // model TFLOP/s (formula above)
  int64_t peak_memory_bytes = 0;    // CUDA: peak allocated by the caching allocator; CPU: the peak resident set during the row less the resident set at its start
  double final_loss = 0;            // loss of the last step (a sanity check: finite, falling)
  // Steps skipped for inf/NaN gradients over the warm-up and timed steps (fp16: the dynamic loss
  // scale backing off; see lib/step/loss_scaler.h). A skipped step still counts as timed.
  int64_t skipped_steps = 0;
  std::string fp8_rewrite;          // the rewrite summary, fp8 only
  std::string fp8_attention;        // fp8.attention: what the attention layers ran (Session::fp8_attention_summary)
  // Whether the timed steps were replayed from a captured CUDA graph (train.cuda_graphs,
  // lib/step/step_graph.h), and if not why.
  bool cuda_graph = false;
  std::string cuda_graph_off_reason;
  // The memory estimate per rank for this precision (lib/plan/resources.h): bytes per parameter
  // by category and the activations of one micro-batch, next to the measured peak.
  plan::MemoryEstimate memory;
  std::vector<std::pair<std::string, double>> phase_ms;  // median per phase (breakdown only)
  // The largest allocator peak within each phase over the breakdown's steps (bytes; breakdown
  // only, in phase_ms's order): which state is resident together at the step's peak, e.g. whether
  // the gradients meet the activations (the backward) or only the weights and moments (the
  // optimizer). A replayed CUDA graph is one phase ("graph"): --set train.cuda_graphs=false.
  std::vector<std::pair<std::string, int64_t>> phase_peak_bytes;
  // train.gemm_autotune (CUDA): the GEMM plans this row tuned (lib/gemm/gemm_autotune.h), how
  // many kept another algorithm than the heuristic's first, and the sum over the tuned plans of
  // one call's time with the heuristic's choice and with the kept one.
  int gemm_plans_tuned = 0;
  int gemm_plans_changed = 0;
  double gemm_heuristic_ms = 0;
  double gemm_chosen_ms = 0;
  std::vector<KernelTime> kernels;  // profile only: longest total first
  double profiled_device_ms_per_step = 0;  // profile only: sum over `kernels`
  bool profiled_gpu = false;               // profile only: `kernels` are GPU kernels (else CPU operators)
};

// Runs the benchmark. Throws fp8t::Error (kBadInput) for bad options, kTrainingFailed when a
// loss is not finite.
std::vector<BenchResult> run_bench(const ExperimentConfig& cfg, const BenchOptions& options);

// The table printed by `fp8train bench`: one row per precision (and FP8 recipe), with the ratio
// of tokens/s to the bf16 row (when there is one) and to the fp8:delayed row (under --recipes).
std::string format_bench_table(const ExperimentConfig& cfg, const BenchOptions& options,
                               const std::vector<BenchResult>& results);

// Everything above as JSON, with the device, versions and the formula.
nlohmann::json bench_to_json(const ExperimentConfig& cfg, const BenchOptions& options,
                             const std::vector<BenchResult>& results);

}  // namespace fp8t::bench
