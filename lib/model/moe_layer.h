// A mixture of experts as a block's feed-forward part (lib/model/gpt.h FeedForward): a router in
// FP32 (lib/model/moe_router.h) sends each token to its top-k experts, dropless; the experts are
// SwiGLU MLPs whose GEMMs run as two grouped Linears over one padded buffer of the routed tokens
// (GroupedLinear in grouped slots, which the FP8 rewrite converts); optional shared experts are one
// dense SwiGLU MLP every token goes through (ordinary slots).
//
//   x [B, T, d] -> router -> dispatch -> experts_fc [E, 2F, d] -> SwiGLU -> experts_proj [E, d, F]
//               -> combine (weighted sum of each token's k outputs, FP32) (+ shared(x))
//
// Load balancing (moe.balance): aux_loss adds coef * E * sum f_e P_e to the loss through the
// backward only (AuxLossGradient: the logged loss stays the cross-entropy, and the term works under
// recompute, whose first pass has no graph); bias moves a per-expert selection bias after each step
// (end_step). Routing statistics accumulate on the device in training mode (a recompute's first
// pass runs in eval mode, so nothing counts twice) until read_stats, on log steps.
#pragma once

#include <torch/torch.h>  // torch::nn::Module

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <string>   // std::string

#include "lib/config/experiment.h"  // ModelSection
#include "lib/model/gpt.h"          // FeedForward, Mlp
#include "lib/model/expert_exchange.h"  // ExpertExchange
#include "lib/model/layers.h"       // GroupedModule, Activation
#include "lib/model/moe_router.h"   // Routing
#include "lib/model/model.h"        // RoutingStats

namespace fp8t {
namespace model {

// The router's parameter and state: weight [E, d] (FP32, trained), bias [E] (balance bias: the
// selection bias, moved by end_step; kept in checkpoints as model state, not a parameter).
class Router : public torch::nn::Module {
 public:
  Router(int64_t experts, int64_t d_model);
  at::Tensor weight;
  at::Tensor bias;
};

class MoeMlp : public FeedForward {
 public:
  explicit MoeMlp(const ModelSection& cfg);
  at::Tensor forward(const at::Tensor& x) override;
  void init_output_weights(double std) override;

  // The gradient scale of the balancing loss: 1 / the step's micro-batches, as the step scales
  // the cross-entropy.
  void set_aux_loss_gradient_scale(double scale) { aux_grad_scale_ = scale; }
  // balance bias: the assignments of the step so far (sum them across data-parallel ranks before
  // end_step); else undefined.
  at::Tensor step_load() const { return step_load_; }
  // After the optimizer step: balance bias moves each expert's bias by rate * sign(mean - load)
  // unless `skipped` (0-d, non-zero: the step was skipped); then the step's load is zeroed.
  void end_step(const at::Tensor& skipped);
  // The statistics since the last read (a host read), and zeroes them.
  RoutingStats read_stats();

  // Expert parallelism (lib/model/expert_exchange.h): keep only experts [first, first + count) of
  // experts_fc and experts_proj (before the FP8 rewrite; the router still scores every expert),
  // then exchange the routed rows with the other ranks' experts through `exchange`.
  void keep_experts(int64_t first, int64_t count);
  void set_expert_exchange(c10::intrusive_ptr<ExpertExchange> exchange) { exchange_ = std::move(exchange); }

  std::shared_ptr<Router> router;
  std::shared_ptr<GroupedModule> experts_fc;    // [E, 2F, d]: gate and up rows of each expert
  std::shared_ptr<GroupedModule> experts_proj;  // [E, d, F]
  std::shared_ptr<Mlp> shared;                  // moe.shared_experts > 0; else null

 private:
  at::Tensor experts_forward(const at::Tensor& x2);  // x2 [T, d] -> [T, d]
  // The routed rows through this rank's experts (local_experts) or through every rank's
  // (exchanged_experts: all-to-all there and back, the split sizes read on the host).
  at::Tensor local_experts(const at::Tensor& x2, const Routing& r);
  at::Tensor exchanged_experts(const at::Tensor& x2, const Routing& r);
  void record(const at::Tensor& counts, const at::Tensor& aux_loss, int64_t assignments, int64_t rows);

  MoeSection moe_;
  c10::intrusive_ptr<ExpertExchange> exchange_;  // expert parallelism; null: every expert here
  std::shared_ptr<Activation> act_;  // SwiGLU between the two grouped GEMMs
  double aux_grad_scale_ = 1.0;
  at::Tensor step_load_;  // [E] float32 (balance bias)
  at::Tensor load_;       // [E] float32 since the last read
  at::Tensor sums_;       // [3] float32 since the last read: padding rows, buffer rows, aux loss
  at::Tensor passes_;     // 0-d float32: training forwards since the last read
};

}  // namespace model
}  // namespace fp8t
