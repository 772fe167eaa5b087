#include "lib/model/moe_model.h"

namespace fp8t {
namespace model {
namespace {

FeedForwardFactory moe_from(const ModelSection& cfg) {
  return [cfg](int64_t layer) -> std::shared_ptr<FeedForward> {
    if (layer < cfg.moe.first_k_dense) return nullptr;  // the dense Mlp of model.d_ff
    return std::make_shared<MoeMlp>(cfg);
  };
}

int64_t weight_numel(const std::shared_ptr<GroupedModule>& m) {
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  return n;
}

}  // namespace

MoeGpt::MoeGpt(const ModelSection& cfg) : Gpt(cfg, moe_from(cfg)) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (auto moe = std::dynamic_pointer_cast<MoeMlp>(blocks[i]->mlp)) {
      moe_layers_.emplace_back(std::string("h").append(std::to_string(i)).append(".mlp"), moe);  // (no GCC 12 stringop false positive)
    }
  }
}

double MoeGpt::flops_per_token() const {
  // Gpt's count holds this rank's expert weights (all of them, or its share under expert
  // parallelism); a token passes through top_k experts' weights of every MoE block.
  const ModelSection& m = config();
  const double active_per_layer = static_cast<double>(m.moe.top_k) * 3.0 * static_cast<double>(m.d_model) *
                                  static_cast<double>(m.expert_ff_dim());
  double held = 0.0;
  for (const auto& [name, moe] : moe_layers_) {
    held += static_cast<double>(weight_numel(moe->experts_fc) + weight_numel(moe->experts_proj));
  }
  return Gpt::flops_per_token() - 6.0 * held + 6.0 * active_per_layer * static_cast<double>(moe_layers_.size());
}

std::vector<std::string> MoeGpt::keep_experts(int64_t first, int64_t count) {
  std::vector<std::string> names;
  for (auto& [name, moe] : moe_layers_) {
    moe->keep_experts(first, count);
    names.push_back(name + ".experts_fc.weight");
    names.push_back(name + ".experts_proj.weight");
  }
  return names;
}

void MoeGpt::set_expert_exchange(c10::intrusive_ptr<ExpertExchange> exchange) {
  for (auto& [name, moe] : moe_layers_) moe->set_expert_exchange(exchange);
}

void MoeGpt::set_micro_batches(int64_t n) {
  for (auto& [name, moe] : moe_layers_) moe->set_aux_loss_gradient_scale(1.0 / static_cast<double>(n));
}

std::vector<at::Tensor> MoeGpt::step_counts() {
  std::vector<at::Tensor> out;
  if (config().moe.balance != LoadBalance::kBias) return out;
  for (auto& [name, moe] : moe_layers_) out.push_back(moe->step_load());
  return out;
}

void MoeGpt::end_step(const at::Tensor& skipped) {
  for (auto& [name, moe] : moe_layers_) moe->end_step(skipped);
}

std::vector<std::pair<std::string, at::Tensor>> MoeGpt::model_state() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, moe] : moe_layers_) out.emplace_back(name + ".router.bias", moe->router->bias);
  return out;
}

std::vector<std::pair<std::string, RoutingStats>> MoeGpt::read_routing_stats() {
  std::vector<std::pair<std::string, RoutingStats>> out;
  for (auto& [name, moe] : moe_layers_) out.emplace_back(name, moe->read_stats());
  return out;
}

}  // namespace model
}  // namespace fp8t
