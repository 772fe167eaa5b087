#include "lib/model/model.h"

#include <unordered_set>  // std::unordered_set

#include "lib/model/gpt.h"          // Gpt
#include "lib/model/moe_model.h"    // MoeGpt
#include "lib/ops/cross_entropy.h"  // ops::cross_entropy

namespace fp8t {
namespace model {

at::Tensor Model::loss(const at::Tensor& logits, const at::Tensor& targets) {
  // The training step and evaluation read the logits only through the loss.
  return ops::cross_entropy(logits, targets, ops::LogitsAfterBackward::kOverwriteLogits);
}

std::vector<std::pair<std::string, at::Tensor>> Model::unique_named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_set<const void*> seen;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) out.emplace_back(item.key(), item.value());
  }
  return out;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : unique_named_parameters()) n += p.second.numel();
  return n;
}

std::shared_ptr<Model> build(const ModelSection& cfg) {
  if (cfg.moe.enabled()) return std::make_shared<MoeGpt>(cfg);
  return std::make_shared<Gpt>(cfg);
}

}  // namespace model
}  // namespace fp8t
