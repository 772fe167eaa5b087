#include "lib/step/weight_amax.h"

#include <ATen/ATen.h>  // at::zeros

#include <cstdlib>  // std::getenv
#include <cstring>  // std::strcmp

#include "lib/fp8/layers/fp8_linear.h"   // fp8::Fp8Linear, fp8::KnownWeightAmax
#include "lib/fp8/recipes/scaling.h"     // fp8::Scaling::scales_from_known_amax
#include "lib/model/model.h"            // model::Model
#include "lib/optim/optimizer.h"        // AdamW

namespace fp8t {
namespace step {

OptimizerWeightAmaxes::OptimizerWeightAmaxes(model::Model& model, const fp8::Scaling* scaling, optim::AdamW& optimizer) {
  if (scaling == nullptr || !scaling->scales_from_known_amax()) return;
  // Measurement switch (issue 53: the link stays only if it gains >= 1% of a `current` step):
  // FP8TRAIN_MEASURE_NO_WEIGHT_AMAX_LINK=1 leaves every layer to its own amax pass.
  const char* off = std::getenv("FP8TRAIN_MEASURE_NO_WEIGHT_AMAX_LINK");
  if (off != nullptr && std::strcmp(off, "1") == 0) return;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    auto* layer = dynamic_cast<fp8::Fp8Linear*>(m.get());
    if (layer == nullptr) continue;
    auto known = std::make_shared<fp8::KnownWeightAmax>();
    known->amax = at::zeros({}, layer->weight.options().dtype(at::kFloat).requires_grad(false));
    const at::Tensor weight = layer->weight;
    const auto stamp = [known, weight] { known->weight_version = static_cast<int64_t>(weight._version()); };
    if (!optimizer.track_abs_max(weight, known->amax, stamp)) continue;
    layer->set_known_weight_amax(known);
    links_.push_back(Link{layer, std::move(known)});
  }
}

OptimizerWeightAmaxes::~OptimizerWeightAmaxes() {
  for (Link& l : links_) l.layer->set_known_weight_amax(nullptr);
}

std::vector<bool> OptimizerWeightAmaxes::current_links() const {
  std::vector<bool> current;
  current.reserve(links_.size());
  for (const Link& l : links_) {
    current.push_back(l.known->weight_version == static_cast<int64_t>(l.layer->weight._version()));
  }
  return current;
}

void OptimizerWeightAmaxes::restamp(const std::vector<bool>& current) {
  for (size_t i = 0; i < links_.size(); ++i) {
    if (current[i]) links_[i].known->weight_version = static_cast<int64_t>(links_[i].layer->weight._version());
  }
}

}  // namespace step
}  // namespace fp8t
