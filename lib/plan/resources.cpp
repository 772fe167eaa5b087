#include "lib/plan/resources.h"

#include <unistd.h>  // ::sysconf

#include <fmt/format.h>  // fmt::format

#include <algorithm>  // std::max
#include <cstdlib>    // std::getenv
#include <cstring>    // std::strcmp

#include <c10/util/Exception.h>  // c10::OutOfMemoryError, TORCH_CHECK_WITH

#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getDeviceProperties
#endif

#include "lib/ops/linear_cross_entropy.h"  // ops::linear_cross_entropy_chunk_rows
#include "lib/util/error.h"                // FP8T_THROW

namespace fp8t::train {
namespace {

// ZeRO-1: full gradient buckets allocated at once during the armed backward (the one filling,
// the one being reduced, the one released at the next launch).
constexpr double kLiveGradientBuckets = 3.0;

std::string gib(double bytes) { return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

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

MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg, int world_size) {
  const ModelSection& m = cfg.model;
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.ff_dim());
  const double vocab = static_cast<double>(m.vocab_size), layers = static_cast<double>(m.n_layer);
  const double mlp_matrices = m.activation == Activation::kSwiGLU ? 3.0 : 2.0;
  MemoryEstimate e;
  e.world_size = std::max(world_size, 1);
  // Attention: q and the output projection d x d each, k and v d x (n_kv_head * head_dim) each.
  const double kv = static_cast<double>(m.kv_heads() * (m.d_model / m.n_head));
  const double block_matrices = layers * (2.0 * d * d + 2.0 * d * kv + mlp_matrices * d * ff);
  e.parameters = vocab * d * (m.tie_embeddings ? 1.0 : 2.0) + block_matrices;
  const double moment_bytes = cfg.train.moments_dtype == MomentsDtype::kBf16 ? 4.0 : 8.0;  // two moments
  e.optimizer_bytes_per_param = moment_bytes;
  if (cfg.dist.zero == 1) {  // ZeRO-1: shards of the gradients and moments, plus the full buckets in use
    e.optimizer_bytes_per_param = moment_bytes / e.world_size;
    e.grad_bytes_per_param = 4.0 / e.world_size;
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
  // recompute casts: the transposes are made in the backward, one block at a time.
  const double fp8_copies = cfg.train.recompute == Recompute::kCasts ? 1.0 : 2.0;
  if (cfg.precision == Precision::kFp8) e.fp8_bytes_per_param = fp8_copies * block_matrices / e.parameters;
  if (cfg.precision == Precision::kBf16 || cfg.precision == Precision::kFp16) {
    e.fp8_bytes_per_param = 2.0 * (block_matrices + vocab * d) / e.parameters;
  }
  e.state_bytes = e.state_bytes_per_param() * e.parameters + e.gradient_bucket_bytes;
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
      chunked_head ? static_cast<double>(ops::linear_cross_entropy_chunk_rows(rows, m.vocab_size, 2)) : tokens;
  e.activation_bytes = (tokens * (layers * kept_per_block(cfg, d, ff) + recomputed_block) + logit_rows * vocab) * element;
  return e;
}

std::string MemoryEstimate::breakdown(const ExperimentConfig& cfg) const {
  std::string opt = fmt::format("AdamW moments {:.3g}", optimizer_bytes_per_param);
  if (cfg.dist.zero == 1) opt += fmt::format(" (8 / {} ranks, dist.zero 1)", world_size);
  const std::string grads =
      cfg.dist.zero == 1 ? fmt::format("gradients {:.3g} (4 / {} ranks; + {} of full buckets in use)",
                                       grad_bytes_per_param, world_size, gib(gradient_bucket_bytes))
                         : fmt::format("gradients {:g}", grad_bytes_per_param);
  const char* copies = cfg.precision == Precision::kFp8 ? "FP8 weight copies" : "autocast weight copies";
  const std::string fp8 = fp8_bytes_per_param > 0 ? fmt::format(" + {} {:.2g}", copies, fp8_bytes_per_param) : "";
  return fmt::format("weights {:g} + {} + {}{} = {:.3g} bytes/parameter (x {:.3g} parameters = {}); "
                     "activations of one micro-batch {} (train.micro_batch_size={} x model.seq_len={}, "
                     "train.recompute {}); total {} per rank",
                     weight_bytes_per_param, grads, opt, fp8, state_bytes_per_param(), parameters,
                     gib(state_bytes), gib(activation_bytes), cfg.train.micro_batch_size, cfg.model.seq_len,
                     recompute_name(cfg.train.recompute), gib(total_bytes()));
}

namespace {

// What can be changed, with what each lever saves for this config.
std::string levers(const ExperimentConfig& cfg, const MemoryEstimate& e) {
  std::string out = "Levers: ";
  if (cfg.dist.zero == 0) {
    out += fmt::format("dist.zero 1 (--zero 1) under torchrun shards the AdamW moments and the gradients: "
                       "(8 + 4) / W bytes/parameter on W ranks, {} less per rank on 2 (with "
                       "train.grad_accum_steps 1); ", gib(6.0 * e.parameters));
  } else {
    out += "more data-parallel ranks (dist.zero 1 divides the AdamW moments and the gradients by their number); ";
  }
  if (cfg.train.moments_dtype == MomentsDtype::kFp32) {
    out += fmt::format("train.moments_dtype bf16 (--moments-dtype bf16) stores the AdamW moments in 4 bytes/parameter "
                       "instead of 8 ({} less); ",
                       gib(4.0 * e.parameters / (cfg.dist.zero == 1 ? e.world_size : 1)));
  }
  if (cfg.train.recompute != Recompute::kBlock) {
    out += "train.recompute block (--recompute block) keeps one d_model vector per layer and token instead of "
           "the layers' inputs; ";
  }
  out += fmt::format("a lower train.micro_batch_size (now {}; train.grad_accum_steps keeps the global batch)",
                     cfg.train.micro_batch_size);
  return out;
}

}  // namespace

void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name,
                       int world_size) {
  const MemoryEstimate e = estimate_training_memory(cfg, world_size);
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
  FP8T_THROW(ExitCode::kBadInput, "the config cannot fit on ", device_name, ": it needs at least ",
             gib(e.total_bytes()), " but the ", device_name, " has ", gib(capacity_bytes), "; ",
             batch_dominates ? activations : state, "; ", batch_dominates ? state : activations,
             batch_dominates ? ". Lower train.micro_batch_size (train.grad_accum_steps keeps the batch) or the model size"
                             : ". Make the model smaller",
             " (the estimate is a lower bound: ", e.breakdown(cfg), "). ", levers(cfg, e));
}

void throw_out_of_memory(const ExperimentConfig& cfg, int world_size, const std::string& when,
                         const std::string& allocator_message) {
  const MemoryEstimate e = estimate_training_memory(cfg, world_size);
  // The allocator's first line says how much was asked and what is in use; no stack trace.
  const std::string first_line = allocator_message.substr(0, allocator_message.find('\n'));
  FP8T_THROW(ExitCode::kBadInput, "out of memory while ", when, ": ", first_line, ". Estimated (a lower bound): ",
             e.breakdown(cfg), ". ", levers(cfg, e), ".");
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

}  // namespace fp8t::train
