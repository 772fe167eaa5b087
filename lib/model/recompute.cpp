#include "lib/model/recompute.h"

#include <ATen/autocast_mode.h>  // at::autocast: enabled, dtype, cache

#include <algorithm>  // std::any_of
#include <utility>    // std::move

#include "lib/util/torch_compat.h"  // compat::to_ivalue, from_ivalue

namespace fp8t {
namespace model {

namespace {

// The autocast settings of one device type. The forward's are put back for the recompute: the
// backward may run on another thread (CUDA's autograd worker), whose autocast state is its own.
struct AutocastState {
  c10::DeviceType device_type = c10::DeviceType::CPU;
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool cache_enabled = true;

  static AutocastState current(c10::DeviceType device_type) {
    return {device_type, at::autocast::is_autocast_enabled(device_type),
            at::autocast::get_autocast_dtype(device_type), at::autocast::is_autocast_cache_enabled()};
  }
  void set() const {
    at::autocast::set_autocast_enabled(device_type, enabled);
    at::autocast::set_autocast_dtype(device_type, dtype);
    at::autocast::set_autocast_cache_enabled(cache_enabled);
  }
};

// `state` with the weight-cast cache off while alive (see recompute.h), then what was set before.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state) : previous_(AutocastState::current(state.device_type)) {
    AutocastState uncached = state;
    uncached.cache_enabled = false;
    uncached.set();
  }
  ~AutocastScope() { previous_.set(); }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState previous_;
};

// `module` (and its children) in eval mode while alive, then back in its previous mode.
class EvalModeScope {
 public:
  explicit EvalModeScope(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalModeScope() { module_.train(was_training_); }
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

// What the backward needs besides the saved inputs. `owner` must outlive the backward, as the
// parameters the backward writes do.
struct RecomputePart : torch::CustomClassHolder {
  RecomputeFn fn;
  torch::nn::Module* owner = nullptr;
  AutocastState autocast;
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  // The inputs go in as one TensorList (each is an autograd input); the part as a non-tensor.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                            const c10::intrusive_ptr<RecomputePart>& part) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["part"] = compat::to_ivalue(part);
    AutocastScope autocast(part->autocast);
    EvalModeScope inference(*part->owner);  // grad mode is already off here (Function::apply)
    return part->fn(inputs.vec());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto part = compat::from_ivalue<RecomputePart>(ctx->saved_data["part"]);
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) inputs.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
    at::Tensor out;
    {
      torch::AutoGradMode record(true);  // the engine runs backward functions with grad mode off
      AutocastScope autocast(part->autocast);
      out = part->fn(inputs);
    }
    // Nested backward: parameter gradients accumulate (and fire their hooks) as in a plain
    // backward; the inputs' gradients land in the detached leaves.
    if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    torch::autograd::variable_list result;
    result.reserve(inputs.size() + 1);
    for (const at::Tensor& x : inputs) result.push_back(x.requires_grad() ? x.grad() : at::Tensor());
    result.emplace_back();  // the part (not a tensor)
    return result;
  }
};

}  // namespace

at::Tensor recompute_in_backward(torch::nn::Module& owner, RecomputeFn part, std::vector<at::Tensor> inputs) {
  const bool any_requires_grad =
      std::any_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) { return t.requires_grad(); });
  if (!at::GradMode::is_enabled() || !owner.is_training() || !any_requires_grad) return part(inputs);
  auto p = c10::make_intrusive<RecomputePart>();
  p->fn = std::move(part);
  p->owner = &owner;
  p->autocast = AutocastState::current(inputs.front().device().type());
  return RecomputeFunction::apply(at::TensorList(inputs), p);
}

}  // namespace model
}  // namespace fp8t
