// Hooks on the gradient accumulators of leaf parameters (autograd's AccumulateGrad nodes): a
// pre-hook runs before a gradient is added into .grad, a post-hook after. GradientSync and the
// ZeRO-3 units count and place gradients with them. The hooks are removed when this is destroyed.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <functional>  // std::function
#include <memory>      // std::unique_ptr

namespace fp8t::dist {

class AccumulatorHooks {
 public:
  AccumulatorHooks();
  ~AccumulatorHooks();
  AccumulatorHooks(const AccumulatorHooks&) = delete;
  AccumulatorHooks& operator=(const AccumulatorHooks&) = delete;

  // `param` must be a leaf that requires grad (its accumulator exists). Either function may be empty.
  void add(const at::Tensor& param, std::function<void()> before, std::function<void()> after);

 private:
  struct Installed;  // the accumulators and what was added to them
  std::unique_ptr<Installed> installed_;
};

}  // namespace fp8t::dist
