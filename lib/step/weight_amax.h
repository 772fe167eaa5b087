// Current scaling's weight amaxes from the optimizer. Under current scaling every FP8 weight is
// cast once per step with a scale from its own amax, and that amax needs a pass over the FP32
// weight just before the cast. AdamW writes that weight one kernel earlier, so it computes the
// amax there (AdamW::track_abs_max, lib/optim/optimizer.h), and the Fp8Linear's next weight cast
// takes its scale from it (fp8::KnownWeightAmax, lib/fp8/layers/fp8_linear.h): the same amax,
// hence the same scales and codes, with one read of every FP8 weight fewer per step.
//
// Linked: the Fp8Linears whose weight the optimizer updates whole and in place (not ZeRO-1 or
// ZeRO-3, which update parts; not a weight with a separate master copy), under a recipe whose
// scale follows from an amax alone (Scaling::scales_from_known_amax). An amax is used only while
// the weight's version counter is the one stamped after the update that wrote it: before the
// first step, and after anything else wrote the weight (a checkpoint loaded into it), the cast
// makes its own amax pass.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstddef>  // size_t
#include <memory>   // std::shared_ptr
#include <vector>   // std::vector

namespace fp8t {
namespace fp8 {
class Fp8Linear;
class Scaling;
struct KnownWeightAmax;
}  // namespace fp8
namespace model {
class Model;
}  // namespace model

namespace optim {
class AdamW;
}  // namespace optim

namespace step {

class OptimizerWeightAmaxes {
 public:
  // Links what can be linked (above); nothing when `scaling` is null or takes no known amax.
  OptimizerWeightAmaxes(model::Model& model, const fp8::Scaling* scaling, optim::AdamW& optimizer);
  ~OptimizerWeightAmaxes();  // unlinks the layers: their casts make their own amax passes again
  OptimizerWeightAmaxes(const OptimizerWeightAmaxes&) = delete;
  OptimizerWeightAmaxes& operator=(const OptimizerWeightAmaxes&) = delete;

  size_t size() const { return links_.size(); }

  // The weights' version counters move on (`bump`) for a step replayed from a CUDA graph, whose
  // AdamW wrote the amaxes on the device: those that were current before stay current.
  template <typename Bump>
  void keep_current_across(const Bump& bump) {
    const std::vector<bool> current = current_links();
    bump();
    restamp(current);
  }

 private:
  struct Link {
    fp8::Fp8Linear* layer;  // its weight is the tracked parameter
    std::shared_ptr<fp8::KnownWeightAmax> known;
  };
  std::vector<bool> current_links() const;
  void restamp(const std::vector<bool>& current);

  std::vector<Link> links_;
};

}  // namespace step
}  // namespace fp8t
