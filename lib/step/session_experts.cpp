// Session's expert-parallel checkpoint views (session.h: whole_experts, cut_to_local_experts).
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/dist/expert_parallel.h"  // dist::ExpertParallel
#include "lib/optim/optimizer.h"       // optim::AdamW
#include "lib/step/session.h"
#include "lib/util/error.h"            // FP8T_INPUT_CHECK

namespace fp8t {
namespace step {
namespace {

// The checkpoint keys of an expert parameter: its weight and its AdamW moments (the step count is
// the same on every rank and stays whole).
std::vector<std::string> expert_keys(const std::string& name) {
  return {"model." + name, "optim." + name + ".exp_avg", "optim." + name + ".exp_avg_sq"};
}

}  // namespace

std::map<std::string, at::Tensor> Session::whole_experts() {
  std::map<std::string, at::Tensor> out;
  if (!experts_) return out;
  const std::map<std::string, at::Tensor> state = optimizer().state_dict();
  for (size_t i = 0; i < expert_names_.size(); ++i) {
    const std::string& name = expert_names_[i];
    out["model." + name] = experts_->gather(expert_params_[i].detach());
    for (const char* moment : {".exp_avg", ".exp_avg_sq"}) {
      const auto it = state.find(name + moment);
      FP8T_CHECK(it != state.end(), "expert parallelism: no optimizer state ", name, moment);
      out["optim." + name + moment] = experts_->gather(it->second);
    }
  }
  return out;
}

void Session::cut_to_local_experts(std::map<std::string, at::Tensor>& tensors) const {
  if (!experts_) return;
  const int64_t experts = cfg_.model.moe.experts;
  const int64_t first = experts_->first_expert(experts), count = experts_->expert_count(experts);
  for (const std::string& name : expert_names_) {
    for (const std::string& key : expert_keys(name)) {
      const auto it = tensors.find(key);
      if (it == tensors.end()) continue;  // missing keys are named by the loaders
      FP8T_INPUT_CHECK(it->second.dim() >= 1 && it->second.size(0) == experts, "checkpoint tensor '", key,
                       "' holds ", it->second.dim() >= 1 ? it->second.size(0) : 0, " experts; this model has ",
                       experts, " (moe.experts)");
      it->second = it->second.narrow(0, first, count).contiguous();
    }
  }
}

}  // namespace step
}  // namespace fp8t
