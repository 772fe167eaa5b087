#include "lib/dist/accumulator_hooks.h"

#include <torch/csrc/autograd/function_hook.h>           // FunctionPreHook
#include <torch/csrc/autograd/utils/lambda_post_hook.h>  // LambdaPostHook
#include <torch/csrc/autograd/variable.h>                // impl::grad_accumulator

#include <algorithm>  // std::find_if
#include <utility>    // std::pair, std::declval
#include <vector>     // std::vector

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::dist {

namespace {

// Runs `fn` before the node does (before a gradient accumulator adds into .grad).
struct LambdaPreHook : torch::autograd::FunctionPreHook {
  explicit LambdaPreHook(std::function<void()> f) : fn(std::move(f)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    fn();
    return grads;
  }
  std::function<void()> fn;
};

}  // namespace

struct AccumulatorHooks::Installed {
  // The accumulator handle type changed between LibTorch releases (shared_ptr in 2.11,
  // intrusive_ptr later); take whatever grad_accumulator() returns.
  using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<std::pair<NodePtr, uintptr_t>> post;
  // Node has no del_pre_hook: the destructor finds ours by address in pre_hooks().
  std::vector<std::pair<NodePtr, const torch::autograd::FunctionPreHook*>> pre;
};

AccumulatorHooks::AccumulatorHooks() : installed_(std::make_unique<Installed>()) {}

AccumulatorHooks::~AccumulatorHooks() {
  for (auto& [acc, key] : installed_->post) acc->del_post_hook(key);
  for (auto& [acc, hook] : installed_->pre) {
    auto& pre = acc->pre_hooks();
    auto it = std::find_if(pre.begin(), pre.end(), [hook = hook](const auto& h) { return h.get() == hook; });
    if (it != pre.end()) pre.erase(it);
  }
}

void AccumulatorHooks::add(const at::Tensor& param, std::function<void()> before, std::function<void()> after) {
  auto acc = torch::autograd::impl::grad_accumulator(param);
  FP8T_CHECK(acc, "a parameter has no gradient accumulator (not a leaf that requires grad)");
  if (before) {
    auto pre = std::make_unique<LambdaPreHook>(std::move(before));
    installed_->pre.emplace_back(acc, pre.get());
    acc->add_pre_hook(std::move(pre));
  }
  if (after) {
    const uintptr_t key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [fn = std::move(after)](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          fn();
          return outputs;
        }));
    installed_->post.emplace_back(std::move(acc), key);
  }
}

}  // namespace fp8t::dist
