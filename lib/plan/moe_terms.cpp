#include "lib/plan/moe_terms.h"

#include <algorithm>  // std::max
#include <cmath>      // std::ceil

namespace fp8t::plan {
namespace {

constexpr double kGroupAlign = 16.0;  // the grouped GEMM's row alignment (lib/model/layers.h)

double element_bytes(const ExperimentConfig& cfg) { return cfg.precision == Precision::kFp32 ? 4.0 : 2.0; }

// Rows of one micro-batch's dispatch buffer (lib/model/moe_router.h padded_rows).
double dispatch_rows(const ExperimentConfig& cfg) {
  const MoeSection& moe = cfg.model.moe;
  const double tokens = static_cast<double>(cfg.train.micro_batch_size * cfg.model.seq_len);
  const double pairs = tokens * static_cast<double>(moe.top_k);
  return std::ceil(pairs / kGroupAlign) * kGroupAlign + kGroupAlign * static_cast<double>(moe.experts);
}

}  // namespace

MoeSizes moe_sizes(const ModelSection& m, double attention) {
  MoeSizes s;
  if (!m.moe.enabled()) return s;
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.expert_ff_dim());
  const double e = static_cast<double>(m.moe.experts);
  s.dense_layers = static_cast<double>(m.moe.first_k_dense);
  s.moe_layers = static_cast<double>(m.n_layer - m.moe.first_k_dense);
  s.router = e * d;
  const double experts_one = e * 3.0 * d * f;
  s.moe_block = attention + s.router + experts_one + static_cast<double>(m.moe.shared_experts) * 3.0 * d * f;
  s.experts = s.moe_layers * experts_one;
  s.active_experts = s.experts * static_cast<double>(m.moe.top_k) / e;
  return s;
}

double experts_per_rank(const ExperimentConfig& cfg, const MoeSizes& s, int world_size) {
  const int64_t ep = cfg.dist.expert_parallel;
  if (ep <= 1 || world_size % ep != 0) return s.experts;
  return s.experts / static_cast<double>(ep);
}

double moe_kept_per_token(const ExperimentConfig& cfg) {
  const Recompute r = cfg.train.recompute;
  if (r == Recompute::kMlp || r == Recompute::kBlock) return 0.0;
  const ModelSection& m = cfg.model;
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.expert_ff_dim());
  const double tokens = static_cast<double>(cfg.train.micro_batch_size * m.seq_len);
  const double rows_per_token = dispatch_rows(cfg) / tokens;
  const bool fp8 = cfg.precision == Precision::kFp8;
  const double inputs = fp8 ? 0.5 * (d + f) : d + f;  // the two grouped GEMMs' saved inputs
  const double shared = 2.0 * static_cast<double>(m.moe.shared_experts) * f;
  return 2.0 * d + rows_per_token * (inputs + 2.0 * f + d) + shared;
}

double dispatch_buffer_bytes(const ExperimentConfig& cfg) {
  if (!cfg.model.moe.enabled()) return 0.0;
  const ModelSection& m = cfg.model;
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.expert_ff_dim());
  return dispatch_rows(cfg) * (2.0 * d + 3.0 * f) * element_bytes(cfg);
}

double expert_wgrad_bytes(const ExperimentConfig& cfg, const MoeSizes& s, double experts_held) {
  if (!cfg.model.moe.enabled() || s.moe_layers <= 0) return 0.0;
  const ModelSection& m = cfg.model;
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.expert_ff_dim());
  const double fc_weights = experts_held / s.moe_layers * (2.0 / 3.0);  // experts_fc: 2F x d of each expert's 3F x d
  const double gradient = cfg.precision == Precision::kFp32 ? 4.0 : 6.0;  // bf16 out of the GEMM + its FP32 widening
  return fc_weights * gradient + dispatch_rows(cfg) * (d + 2.0 * f) * element_bytes(cfg);
}

double moe_transient_bytes(const ExperimentConfig& cfg, const MoeSizes& s, double experts_held) {
  return std::max(dispatch_buffer_bytes(cfg), expert_wgrad_bytes(cfg, s, experts_held));
}

}  // namespace fp8t::plan
