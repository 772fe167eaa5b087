// Fp8Norm: LayerNorm / RMSNorm with FP32 statistics whose output is handed to the following
// Fp8Linear already cast to FP8 with that Linear's input scale (so the GPU kernel writes FP8
// straight from the normalisation, and the Linear skips its own input cast). The amax of the
// output is recorded into the Linear's input slot. The backward runs in high precision.
#pragma once

#include <memory>  // std::shared_ptr

#include "lib/fp8/fp8_linear.h"  // Fp8Linear
#include "lib/model/layers.h"    // model::Norm

namespace fp8t {
namespace fp8 {

class Fp8Norm : public model::UnaryModule {
 public:
  // Shares src's weight and bias. `consumer` is the only Linear reading this norm's output.
  Fp8Norm(const model::Norm& src, std::shared_ptr<Fp8Linear> consumer);
  at::Tensor forward(const at::Tensor& x) override;

  model::Norm::Kind kind;
  int64_t dim;
  double eps;
  at::Tensor weight;
  at::Tensor bias;
  const Fp8Linear& consumer() const { return *consumer_; }

 private:
  std::shared_ptr<Fp8Linear> consumer_;
};

}  // namespace fp8
}  // namespace fp8t
