#include "lib/plan/resources.h"

#include <unistd.h>  // ::sysconf

#include <fmt/format.h>  // fmt::format

#include <algorithm>  // std::max
#include <cstdlib>    // std::getenv
#include <cstring>    // std::strcmp
#include <memory>     // std::shared_ptr

#include <ATen/ATen.h>            // at::empty, at::_fused_sdp_choice
#include <ATen/SDPBackend.h>      // at::SDPBackend
#include <c10/util/Exception.h>  // c10::OutOfMemoryError, TORCH_CHECK_WITH

#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getDeviceProperties
#endif

#include "lib/fp8/recipes/scaling.h"       // fp8::make_scaling, Scaling::weight_parts, transposes_weight_codes
#include "lib/ops/linear_cross_entropy.h"  // ops::linear_cross_entropy_chunk_rows
#include "lib/plan/memory_plan.h"           // plan_memory, format_levers
#include "lib/plan/moe_terms.h"             // moe_sizes, experts_per_rank, moe_kept_per_token, moe_transient_bytes
#include "lib/util/error.h"                // FP8T_THROW

namespace fp8t::plan {
namespace {

// ZeRO-1: full gradient buckets allocated at once during the armed backward (the one filling,
// the one being reduced, the one released at the next launch).
constexpr double kLiveGradientBuckets = 3.0;

// The math path's [B, H, T, T] tensors each layer keeps for the backward: the softmax output,
// the dropout noise and the dropped probabilities (LibTorch 2.15 on the CPU: the saved tensors
// measured 3.3 x the FP32 scores, 6.4 x the BF16 ones, which it upcasts).
constexpr double kScoreCopiesKept = 3.0;

std::string gib(double bytes) { return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kActivation: return "activation";
    case Recompute::kCasts: return "casts";
    case Recompute::kAttention: return "attention";
    case Recompute::kMlp: return "mlp";
    case Recompute::kBlock: return "block";
    case Recompute::kNone: break;
  }
  return "none";
}

namespace {

// Per token and block, the elements kept for the backward: 3 * d (the inputs of the attention
// and MLP norms and projections) + 2 * ff (the MLP's hidden activation before and after the
// nonlinearity). Recompute keeps less (a lower bound: the recomputed part still exists for
// one block at a time, counted once).
double kept_per_block(const ExperimentConfig& cfg, double d, double ff) {
  switch (cfg.train.recompute) {
    case Recompute::kActivation:  // fp8: the activation's 1-byte copy (half an element) is not kept
      return cfg.precision == Precision::kFp8 ? 3.0 * d + 1.5 * ff : 3.0 * d + 2.0 * ff;
    case Recompute::kCasts:  // fp8: also the attention projection's input copy (half an element)
      return cfg.precision == Precision::kFp8 ? 2.5 * d + 1.5 * ff : 3.0 * d + 2.0 * ff;
    case Recompute::kAttention: return 2.0 * d + 2.0 * ff;
    case Recompute::kMlp: return 2.0 * d;
    case Recompute::kBlock: return d;
    case Recompute::kNone: break;
  }
  return 3.0 * d + 2.0 * ff;
}

}  // namespace

namespace {

// The model's matrices (lower bound: norms, biases and learned positions left out), in the
// units ZeRO-3 gathers one at a time: the token embedding, each block, the head.
struct ModelSizes {
  double embedding = 0;  // vocab x d; the head has as many (the same tensor when tied)
  double block = 0;      // one block's attention and MLP matrices (the largest block: a MoE one)
  double layers = 0;
  double parameters = 0;  // every parameter once (a tied head not twice)
  double block_matrices = 0;  // every block's matrices that an FP8 run casts (a router's stay FP32)
  MoeSizes moe;           // moe.experts > 0 (moe_terms.h); else zeroes
};

ModelSizes model_sizes(const ModelSection& m) {
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.ff_dim());
  const double mlp_matrices = m.activation == Activation::kSwiGLU ? 3.0 : 2.0;
  // Attention: q and the output projection d x d each, k and v d x (n_kv_head * head_dim) each.
  const double kv = static_cast<double>(m.kv_heads() * (m.d_model / m.n_head));
  const double attention = 2.0 * d * d + 2.0 * d * kv;
  ModelSizes s;
  s.embedding = static_cast<double>(m.vocab_size) * d;
  s.block = attention + mlp_matrices * d * ff;
  s.layers = static_cast<double>(m.n_layer);
  s.block_matrices = s.layers * s.block;
  s.moe = moe_sizes(m, attention);
  if (m.moe.enabled()) {
    s.block_matrices = s.moe.dense_layers * s.block + s.moe.moe_layers * (s.moe.moe_block - s.moe.router);
    s.block = s.moe.moe_block;
  }
  s.parameters = s.embedding * (m.tie_embeddings ? 1.0 : 2.0) + s.block_matrices +
                 s.moe.moe_layers * s.moe.router;
  return s;
}

// The most bytes `k` consecutive units of [embedding, block x layers, head] hold together (unit
// bytes `ends` for the embedding and the head, `block` for a block); `all` when k spans the model.
double widest_run(double ends, double block, double layers, double k, double all) {
  if (k >= layers + 2.0) return all;
  double widest = ends + std::min(k - 1.0, layers) * block;  // the embedding or the head, and blocks
  if (k <= layers) widest = std::max(widest, k * block);
  return widest;
}

// What the recipe says of its FP8 weights (the recipe's state class answers; it allocates nothing
// before it is finalized): the FP8 copies each FP8 Linear's weight cache keeps (its E4M3 weight and
// its transpose; 1 with train.recompute casts where the recipe transposes the codes in the
// backward), and whether ZeRO-3 gathers them as FP8 codes (Scaling::WeightParts::fp8_gather).
struct Fp8Weights {
  double cached_copies = 2.0;
  bool gathered_as_codes = true;
};
Fp8Weights fp8_weights(const ExperimentConfig& cfg) {
  const std::shared_ptr<fp8::Scaling> recipe = fp8::make_scaling(cfg.fp8);
  const bool transposes = cfg.train.recompute == Recompute::kCasts && recipe->transposes_weight_codes();
  return {transposes ? 1.0 : 2.0, recipe->weight_parts().fp8_gather};
}

// ZeRO-3 (the header's table): everything sharded over W ranks, plus the gathered units and the
// full gradient buffers of two units.
void estimate_zero3(const ExperimentConfig& cfg, const ModelSizes& s, double moment_bytes, MemoryEstimate& e) {
  const double w = e.shard_ranks;
  e.weight_bytes_per_param = 4.0 / w;
  e.grad_bytes_per_param = 4.0 / w;
  e.optimizer_bytes_per_param = moment_bytes / w;
  e.fp8_bytes_per_param = 0.0;
  const double compute = cfg.precision == Precision::kFp32 ? 4.0 : 2.0;
  // FP8 block Linears: the gathered E4M3 weight and its transpose; the head stays high precision.
  // A recipe whose weights are not gathered as codes (rowwise) gathers them in the compute dtype
  // like the rest, and each layer keeps its own FP8 weight cache: copies on every rank, unsharded.
  const bool fp8 = cfg.precision == Precision::kFp8;
  const Fp8Weights fp8_weight = fp8 ? fp8_weights(cfg) : Fp8Weights{};
  const bool codes = fp8 && fp8_weight.gathered_as_codes;
  if (fp8 && !codes) e.fp8_bytes_per_param = fp8_weight.cached_copies * s.layers * s.block / e.parameters;
  const double block_bytes = codes ? 2.0 : compute;
  const double head = cfg.model.tie_embeddings ? 0.0 : s.embedding;  // a tied head is the embedding's tensor
  const double all_gathered = compute * (s.embedding + head) + block_bytes * s.block_matrices;
  const double units = s.layers + (cfg.model.tie_embeddings ? 1.0 : 2.0);
  const double in_flight = cfg.dist.reshard_after_forward
                               ? std::min(1.0 + static_cast<double>(cfg.dist.prefetch), units)
                               : units;
  e.gathered_units = static_cast<int64_t>(in_flight);
  e.gathered_weight_bytes = widest_run(compute * s.embedding, block_bytes * s.block, s.layers, in_flight, all_gathered);
  const double grad_bytes = cfg.dist.reduce_dtype == ReduceDtype::kBf16 ? 6.0 : 4.0;
  e.gradient_bucket_bytes = grad_bytes * widest_run(s.embedding, s.block, s.layers, 2.0, s.parameters);
}

// DDP and ZeRO-1: the gradient shards and buckets, the moments, the persistent weight copies.
void estimate_replicated(const ExperimentConfig& cfg, const ModelSizes& s, double moment_bytes, MemoryEstimate& e) {
  e.optimizer_bytes_per_param = moment_bytes / e.shard_ranks;
  if (e.layout.shards_optimizer_state()) {  // ZeRO-1: shards of the gradients and moments, plus the full buckets in use
    e.grad_bytes_per_param = 4.0 / e.shard_ranks;
    // With accumulation the full buckets (4 bytes/parameter) live through the micro-batches
    // before the last; the shards replace them as they are released.
    const double all_buckets = 4.0 * e.parameters;
    e.gradient_bucket_bytes = cfg.train.grad_accum_steps > 1
                                  ? all_buckets - e.grad_bytes_per_param * e.parameters
                                  : std::min(all_buckets, kLiveGradientBuckets * cfg.dist.bucket_mb * 1024.0 * 1024.0);
  }
  // The block Linears run in FP8 (the head stays high precision by default): an E4M3 copy and
  // its transpose of each of their weights. bf16/fp16: autocast's 2-byte copy of every Linear
  // weight (head included), kept for the backward.
  // recompute casts: the transposes are made in the backward, one block at a time (where the
  // recipe can transpose the codes: not rowwise, whose cache keeps both layouts). A mixture of
  // experts' grouped layers always keep both copies (moe_terms.h), of this rank's experts.
  const double experts_held = experts_per_rank(cfg, s.moe, e.world_size);
  const double block_matrices = s.block_matrices - (s.moe.experts - experts_held);
  if (cfg.precision == Precision::kFp8) {
    e.fp8_bytes_per_param =
        (fp8_weights(cfg).cached_copies * (block_matrices - experts_held) + 2.0 * experts_held) / e.parameters;
  }
  if (cfg.precision == Precision::kBf16 || cfg.precision == Precision::kFp16) {
    e.fp8_bytes_per_param = 2.0 * (block_matrices + s.embedding) / e.parameters;
  }
  // The chunked head (bf16, fp8) makes its FP32 weight gradient in the forward.
  if (cfg.precision == Precision::kBf16 || cfg.precision == Precision::kFp8) e.head_gradient_bytes = 4.0 * s.embedding;
}

double activation_bytes(const ExperimentConfig& cfg) {
  const ModelSection& m = cfg.model;
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.ff_dim());
  const double tokens = static_cast<double>(cfg.train.micro_batch_size) * static_cast<double>(m.seq_len);
  const double element = cfg.precision == Precision::kFp32 ? 4.0 : 2.0;
  const bool part_recomputed = cfg.train.recompute != Recompute::kNone && cfg.train.recompute != Recompute::kActivation &&
                               cfg.train.recompute != Recompute::kCasts;
  const double recomputed_block = part_recomputed ? 3.0 * d + 2.0 * ff : 0.0;
  // The logits: whole in fp32 and fp16; bf16 and fp8 run the head chunked (BF16 autocast on the
  // GPU: lib/ops/linear_cross_entropy.h), one chunk of logits at a time.
  const bool chunked_head = cfg.precision == Precision::kBf16 || cfg.precision == Precision::kFp8;
  const int64_t rows = cfg.train.micro_batch_size * m.seq_len;
  const double logit_rows =
      chunked_head ? static_cast<double>(ops::linear_cross_entropy_chunk_rows(
                                             rows, m.vocab_size, 2, cfg.train.loss_chunk_mib << 20)) : tokens;
  // A MoE block keeps its attention part and its experts' part (moe_terms.h) instead of an MLP's.
  const double moe_layers = static_cast<double>(m.moe.enabled() ? m.n_layer - m.moe.first_k_dense : 0);
  const double kept = (static_cast<double>(m.n_layer) - moe_layers) * kept_per_block(cfg, d, ff) +
                      moe_layers * (kept_per_block(cfg, d, 0.0) + moe_kept_per_token(cfg));
  return (tokens * (kept + recomputed_block) + logit_rows * static_cast<double>(m.vocab_size)) * element;
}

}  // namespace

AttentionScores attention_scores_on(const ExperimentConfig& cfg, const std::string& device_name) {
  if (device_name != "cpu") return AttentionScores::kFused;
  const ModelSection& m = cfg.model;
  const at::ScalarType dtype = cfg.precision == Precision::kFp32   ? at::kFloat
                               : cfg.precision == Precision::kFp16 ? at::kHalf
                                                                   : at::kBFloat16;
  const at::TensorOptions options = at::TensorOptions().dtype(dtype);
  const int64_t head_dim = m.d_model / m.n_head;
  // The choice depends on the heads, the head size, the dtype and dropout, not on the length.
  const at::Tensor q = at::empty({1, m.n_head, 2, head_dim}, options).requires_grad_(true);
  const at::Tensor kv = at::empty({1, m.kv_heads(), 2, head_dim}, options).requires_grad_(true);
  const int64_t choice = at::_fused_sdp_choice(q, kv, kv, /*attn_mask=*/{}, m.dropout, /*is_causal=*/true,
                                               /*scale=*/std::nullopt, /*enable_gqa=*/m.kv_heads() != m.n_head);
  return choice == static_cast<int64_t>(at::SDPBackend::math) ? AttentionScores::kMaterialised
                                                                : AttentionScores::kFused;
}

double attention_score_bytes(const ExperimentConfig& cfg) {
  const ModelSection& m = cfg.model;
  const double element = cfg.precision == Precision::kFp32 ? 4.0 : 2.0;
  const double t = static_cast<double>(m.seq_len);
  const double one = static_cast<double>(cfg.train.micro_batch_size) * static_cast<double>(m.n_head) * t * t * element;
  return (kScoreCopiesKept * static_cast<double>(m.n_layer) + 1.0) * one;
}

MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg, const ParallelLayout& layout,
                                        AttentionScores scores) {
  const ModelSizes s = model_sizes(cfg.model);
  MemoryEstimate e;
  e.layout = layout;
  e.world_size = std::max(layout.world_size, 1);
  e.shard_ranks = layout.shard_ranks();
  // dist.expert_parallel: this rank's share of the experts (moe_terms.h).
  const double experts_held = experts_per_rank(cfg, s.moe, e.world_size);
  e.parameters = s.parameters - (s.moe.experts - experts_held);
  e.total_parameters = s.parameters;
  e.active_parameters = s.parameters - s.moe.experts + s.moe.active_experts;
  const double moment_bytes = cfg.train.moments_dtype == MomentsDtype::kBf16 ? 4.0 : 8.0;  // two moments
  if (layout.shards_weights()) {
    estimate_zero3(cfg, s, moment_bytes, e);
  } else {
    estimate_replicated(cfg, s, moment_bytes, e);
  }
  e.state_bytes = e.state_bytes_per_param() * e.parameters + e.gradient_bucket_bytes;
  e.activation_bytes = activation_bytes(cfg);
  e.moe_transient_bytes = moe_transient_bytes(cfg, s.moe, experts_held);
  if (scores == AttentionScores::kMaterialised) e.attention_score_bytes = attention_score_bytes(cfg);
  return e;
}

MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg) {
  return estimate_training_memory(cfg, ParallelLayout::of(cfg.dist));
}

std::string MemoryEstimate::breakdown(const ExperimentConfig& cfg) const {
  const double moments = cfg.train.moments_dtype == MomentsDtype::kBf16 ? 4.0 : 8.0;
  std::string weights = fmt::format("weights {:.3g}", weight_bytes_per_param);
  if (layout.shards_weights()) weights += fmt::format(" (4 / {} ranks)", shard_ranks);
  std::string grads = fmt::format("gradients {:.3g}", grad_bytes_per_param);
  if (layout.shards_gradients()) {
    grads += fmt::format(" (4 / {} ranks; + {} of full {} in use)", shard_ranks, gib(gradient_bucket_bytes),
                         layout.shards_weights() ? "unit gradients" : "buckets");
  }
  std::string opt = fmt::format("AdamW moments {:.3g}", optimizer_bytes_per_param);
  if (layout.shards_optimizer_state()) {
    opt += fmt::format(" ({:g} / {} ranks, dist.zero {})", moments, shard_ranks, layout.zero_level());
  }
  const char* copies = cfg.precision == Precision::kFp8 ? "FP8 weight copies" : "autocast weight copies";
  const std::string fp8 = fp8_bytes_per_param > 0 ? fmt::format(" + {} {:.2g}", copies, fp8_bytes_per_param) : "";
  std::string transient;
  if (gathered_weight_bytes > 0) {
    transient += fmt::format("; gathered weights of {} units {}", gathered_units, gib(gathered_weight_bytes));
  }
  if (head_gradient_bytes > 0) transient += fmt::format("; the chunked head's FP32 weight gradient {}", gib(head_gradient_bytes));
  if (attention_score_bytes > 0) {
    transient += fmt::format("; attention scores of the math path (model.dropout {:g}) {}", cfg.model.dropout,
                             gib(attention_score_bytes));
  }
  if (moe_transient_bytes > 0) {
    transient += fmt::format("; one MoE block's transient buffers {} ({:.3g} parameters in all, {:.3g} active per "
                             "token)", gib(moe_transient_bytes), total_parameters, active_parameters);
  }
  return fmt::format("{} + {} + {}{} = {:.3g} bytes/parameter (x {:.3g} parameters = {}){}; "
                     "activations of one micro-batch {} (train.micro_batch_size={} x model.seq_len={}, "
                     "train.recompute {}); total {} per rank",
                     weights, grads, opt, fp8, state_bytes_per_param(), parameters, gib(state_bytes), transient,
                     gib(activation_bytes), cfg.train.micro_batch_size, cfg.model.seq_len,
                     recompute_name(cfg.train.recompute), gib(total_bytes()));
}

namespace {

// The attention-score term of check_memory_fits's message ("" when there is none).
std::string attention_scores_text(const ExperimentConfig& cfg, const MemoryEstimate& e, const std::string& device) {
  if (e.attention_score_bytes <= 0) return "";
  const ModelSection& m = cfg.model;
  return fmt::format("attention scores: {} (with model.dropout={:g} LibTorch runs the attention on the {} on its math "
                     "path, which holds {:g} tensors of train.micro_batch_size={} x model.n_head={} x model.seq_len={} "
                     "x model.seq_len; model.dropout 0 runs a fused kernel that holds none); ",
                     gib(e.attention_score_bytes), m.dropout, device, kScoreCopiesKept * m.n_layer + 1.0,
                     cfg.train.micro_batch_size, m.n_head, m.seq_len, m.seq_len);
}

}  // namespace

void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name) {
  check_memory_fits(cfg, capacity_bytes, device_name, ParallelLayout::of(cfg.dist));
}

void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name,
                       const ParallelLayout& layout) {
  const MemoryEstimate e = estimate_training_memory(cfg, layout, attention_scores_on(cfg, device_name));
  if (e.total_bytes() <= capacity_bytes) return;
  const ModelSection& m = cfg.model;
  const std::string model_keys = fmt::format("model.d_model={}, model.n_layer={}, model.vocab_size={}", m.d_model,
                                             m.n_layer, m.vocab_size);
  const std::string batch_keys = fmt::format("train.micro_batch_size={} x model.seq_len={}",
                                             cfg.train.micro_batch_size, m.seq_len);
  const std::string state = fmt::format("weights, gradients, AdamW state and weight copies of {:.3g} parameters: {} "
                                        "(set by {})",
                                        e.parameters, gib(e.state_bytes), model_keys);
  const std::string activations = fmt::format("activations of one micro-batch: {} (set by {}, times the layers' "
                                              "widths)", gib(e.activation_bytes), batch_keys);
  const bool batch_dominates = e.activation_bytes > e.state_bytes;
  const std::string scores = attention_scores_text(cfg, e, device_name);
  // Two sentences with the keys, then the planner's table (what --dry-run --plan-* prints): the
  // categories, the verdict and the levers, one per line.
  std::string table = format_memory_plan(plan_memory(cfg, PlanTarget{layout.world_size, capacity_bytes, device_name}));
  if (!table.empty() && table.back() == '\n') table.pop_back();
  FP8T_THROW(ExitCode::kBadInput, "the config cannot fit on ", device_name, ": it needs at least ",
             gib(e.total_bytes()), " (a lower bound) but the ", device_name, " has ", gib(capacity_bytes), "; ",
             scores, batch_dominates ? activations : state, "; ", batch_dominates ? state : activations,
             batch_dominates ? ". Lower train.micro_batch_size (train.grad_accum_steps keeps the batch) or the model size"
                             : ". Make the model smaller",
             ", or use a lever below:\n", table);
}

void throw_out_of_memory(const ExperimentConfig& cfg, const ParallelLayout& layout, const std::string& when,
                         const std::string& allocator_message) {
  const MemoryEstimate e = estimate_training_memory(cfg, layout);
  // The allocator's first line says how much was asked and what is in use; no stack trace.
  const std::string first_line = allocator_message.substr(0, allocator_message.find('\n'));
  FP8T_THROW(ExitCode::kBadInput, "out of memory while ", when, ": ", first_line, ". Estimated (a lower bound): ",
             e.breakdown(cfg), ". ", format_levers(plan_memory(cfg, PlanTarget{layout.world_size, 0.0, ""})), ".");
}

void maybe_inject_out_of_memory(const char* point) {
  const char* v = std::getenv("FP8TRAIN_TEST_OOM");
  if (v == nullptr || std::strcmp(v, point) != 0) return;
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (injected by FP8TRAIN_TEST_OOM=", point, ")");
}

double device_memory_capacity(const c10::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) {
    return static_cast<double>(at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->totalGlobalMem);
  }
#endif
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

}  // namespace fp8t::plan
