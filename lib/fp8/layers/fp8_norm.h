// Fp8Norm: LayerNorm / RMSNorm with FP32 statistics whose output is handed to the following
// Fp8Linear already cast to FP8 with that Linear's input scale (so the GPU kernel writes FP8
// straight from the normalisation, and the Linear skips its own input cast). The amax of the
// output is recorded into the Linear's input slot. The backward runs in high precision.
#pragma once

#include <memory>  // std::shared_ptr

#include "lib/fp8/layers/fp8_linear.h"  // Fp8Linear
#include "lib/model/layers.h"           // model::Norm, model::ResidualNorm

namespace fp8t {
namespace fp8 {

class Fp8Norm : public model::ResidualNorm {
 public:
  // Shares src's weight and bias. `consumer` is the only Linear reading this norm's output.
  Fp8Norm(const model::Norm& src, std::shared_ptr<Fp8Linear> consumer);
  at::Tensor forward(const at::Tensor& x) override;
  // Fused when x is float32 and h a float tensor of its shape; otherwise x + h, then forward.
  model::AddNormOutput forward_add(const at::Tensor& x, const at::Tensor& h) override;

  model::Norm::Kind kind;
  int64_t dim;
  double eps;
  at::Tensor weight;
  at::Tensor bias;
  const Fp8Linear& consumer() const { return *consumer_; }

 private:
  // The norm of x, or with h defined of x + h (then `sum` is x + h), handed to the consumer.
  model::AddNormOutput run(const at::Tensor& x, const at::Tensor& h);
  std::shared_ptr<Fp8Linear> consumer_;
};

}  // namespace fp8
}  // namespace fp8t
