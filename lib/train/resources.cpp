#include "lib/train/resources.h"

#include <unistd.h>  // ::sysconf

#include <fmt/format.h>  // fmt::format

#if defined(FP8T_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getDeviceProperties
#endif

#include "lib/util/error.h"  // FP8T_THROW

namespace fp8t::train {
namespace {

std::string gib(double bytes) { return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg) {
  const ModelSection& m = cfg.model;
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.ff_dim());
  const double vocab = static_cast<double>(m.vocab_size), layers = static_cast<double>(m.n_layer);
  const double mlp_matrices = m.activation == Activation::kSwiGLU ? 3.0 : 2.0;
  MemoryEstimate e;
  // Attention: q and the output projection d x d each, k and v d x (n_kv_head * head_dim) each.
  const double kv = static_cast<double>(m.kv_heads() * (m.d_model / m.n_head));
  e.parameters = vocab * d * (m.tie_embeddings ? 1.0 : 2.0) + layers * (2.0 * d * d + 2.0 * d * kv + mlp_matrices * d * ff);
  e.state_bytes = 16.0 * e.parameters;
  const double tokens = static_cast<double>(cfg.train.micro_batch_size) * static_cast<double>(m.seq_len);
  const double element = cfg.precision == Precision::kFp32 ? 4.0 : 2.0;
  e.activation_bytes = tokens * (layers * (3.0 * d + 2.0 * ff) + vocab) * element;
  return e;
}

void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name) {
  const MemoryEstimate e = estimate_training_memory(cfg);
  if (e.total_bytes() <= capacity_bytes) return;
  const ModelSection& m = cfg.model;
  const std::string model_keys = fmt::format("model.d_model={}, model.n_layer={}, model.vocab_size={}", m.d_model,
                                             m.n_layer, m.vocab_size);
  const std::string batch_keys = fmt::format("train.micro_batch_size={} x model.seq_len={}",
                                             cfg.train.micro_batch_size, m.seq_len);
  const std::string state = fmt::format("weights, gradients and AdamW state of {:.3g} parameters: {} (set by {})",
                                        e.parameters, gib(e.state_bytes), model_keys);
  const std::string activations = fmt::format("activations of one micro-batch: {} (set by {}, times the layers' "
                                              "widths)", gib(e.activation_bytes), batch_keys);
  const bool batch_dominates = e.activation_bytes > e.state_bytes;
  FP8T_THROW(ExitCode::kBadInput, "the config cannot fit on ", device_name, ": it needs at least ",
             gib(e.total_bytes()), " but the ", device_name, " has ", gib(capacity_bytes), "; ",
             batch_dominates ? activations : state, "; ", batch_dominates ? state : activations,
             batch_dominates ? ". Lower train.micro_batch_size (train.grad_accum_steps keeps the batch) or the model size"
                             : ". Make the model smaller",
             " (the estimate is a lower bound)");
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
