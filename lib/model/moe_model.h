// The mixture-of-experts family of model::Model (moe.experts > 0): the Gpt decoder (attention,
// norms, embeddings, head, units, recompute: lib/model/gpt.h) whose blocks from moe.first_k_dense
// on have a MoeMlp (lib/model/moe_layer.h) as their feed-forward part; the first ones keep the
// dense MLP of model.d_ff. What it adds to the Gpt family: the FLOPs of the active parameters only,
// the balancing loss's gradient scale, the router's state and statistics (model.h's "state outside
// the gradients"), and its Hugging Face names (OLMoE's layout, lib/model/hf_layout.h).
#pragma once

#include <memory>   // std::shared_ptr
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/config/experiment.h"  // ModelSection
#include "lib/model/gpt.h"          // Gpt
#include "lib/model/moe_layer.h"    // MoeMlp

namespace fp8t {
namespace model {

class MoeGpt : public Gpt {
 public:
  explicit MoeGpt(const ModelSection& cfg);

  // 6 * (the parameters a token passes through: every non-embedding parameter but the experts
  // it is not routed to) + the attention term of Gpt::flops_per_token. With moe.top_k of
  // moe.experts experts active, an expert layer counts top_k / experts of its expert weights.
  double flops_per_token() const override;
  void set_micro_batches(int64_t n) override;
  std::vector<at::Tensor> step_counts() override;
  void end_step(const at::Tensor& skipped) override;
  // "h<i>.mlp.router.bias" of every MoE block (balance bias).
  std::vector<std::pair<std::string, at::Tensor>> model_state() override;
  std::vector<std::pair<std::string, RoutingStats>> read_routing_stats() override;
  // Every MoE block keeps experts [first, first + count); returns their weights' names.
  std::vector<std::string> keep_experts(int64_t first, int64_t count) override;
  void set_expert_exchange(c10::intrusive_ptr<ExpertExchange> exchange) override;

  // The MoE blocks' feed-forward parts, by name ("h3.mlp"), in block order.
  const std::vector<std::pair<std::string, std::shared_ptr<MoeMlp>>>& moe_layers() const { return moe_layers_; }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<MoeMlp>>> moe_layers_;
};

}  // namespace model
}  // namespace fp8t
