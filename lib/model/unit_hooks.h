// Calls the model makes around each of its units, for a holder that must act before a unit
// computes and after it (fully sharded data parallelism gathers a unit's weights before its
// forward and frees them after it: lib/dist/fully_sharded.h). The model knows nothing of what
// they do; without hooks it calls nothing.
//
// The units, in forward order: 0 = the embeddings (wte, wpe), 1..n_layer = the blocks, n_layer
// + 1 = the head (ln_f and lm_head; a tied head's weight belongs to unit 0). Gpt::hidden enters
// the head before ln_f; head_loss and forward leave it after the head.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <vector>  // std::vector

namespace fp8t {
namespace model {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before the unit's first op of this forward.
  virtual void before_forward(int unit) = 0;
  // After its last op: `outputs` are the tensors the unit hands on (defined ones only). Returns
  // them, possibly as new tensors that carry a hook into their gradient (the unit's backward
  // starts when their gradient arrives); the model continues with what is returned.
  virtual std::vector<at::Tensor> after_forward(int unit, std::vector<at::Tensor> outputs) = 0;
};

}  // namespace model
}  // namespace fp8t
