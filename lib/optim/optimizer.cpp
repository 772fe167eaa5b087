#include "lib/optim/optimizer.h"

#include <set>      // std::set
#include <sstream>  // std::ostringstream

#include <ATen/ATen.h>            // at::zeros, at::tensor
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not in ATen.h without the precompiled header)

#include "lib/numerics/adamw_math.h"  // train::adamw::state_from_step
#include "lib/optim/adamw_step.h"     // adamw_multi_tensor_step
#include "lib/util/error.h"           // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t::optim {
namespace {

std::string shape_str(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

bool is_step_key(const std::string& key) {
  return key.size() > 5 && key.compare(key.size() - 5, 5, ".step") == 0;
}

}  // namespace

void AdamW::check_options() const {
  FP8T_CHECK(options_.beta1 >= 0.0 && options_.beta1 < 1.0, "AdamW: beta1 must be in [0, 1)");
  FP8T_CHECK(options_.beta2 >= 0.0 && options_.beta2 < 1.0, "AdamW: beta2 must be in [0, 1)");
  FP8T_CHECK(options_.eps >= 0.0, "AdamW: eps must be >= 0");
  FP8T_CHECK(options_.weight_decay >= 0.0, "AdamW: weight_decay must be >= 0");
}

at::Tensor AdamW::Slot::grad() const {
  if (shard_grad.defined()) return shard_grad;
  const at::Tensor& g = param.grad();
  if (!g.defined() || (range.begin == 0 && range.length == param.numel())) return g;
  return g.view(-1).narrow(0, range.begin, range.length);
}

AdamW::AdamW(NamedParameters params, AdamWOptions options, const ShardRanges& shard,
             const std::map<std::string, at::Tensor>& shard_grads,
             const std::map<std::string, at::Tensor>& shard_masters)
    : options_(options), sharded_(true) {
  check_options();
  std::set<const void*> seen_tensors;
  at::NoGradGuard no_grad;
  for (auto& [name, param] : params) {
    FP8T_CHECK(param.defined(), "AdamW: parameter '", name, "' is undefined");
    if (!seen_tensors.insert(param.unsafeGetTensorImpl()).second) continue;  // tied: once
    const auto it = shard.find(name);
    if (it == shard.end() || it->second.length == 0) continue;  // owned by other ranks
    FP8T_CHECK(param.scalar_type() == kStateDtype && param.is_contiguous(), "AdamW: ZeRO-1 needs float32 "
               "contiguous parameters, '", name, "' is not");
    const ParamRange r = it->second;
    FP8T_CHECK(r.begin >= 0 && r.length > 0 && r.begin + r.length <= param.numel(), "AdamW: range of '", name,
               "' is outside the parameter");
    Slot s;
    s.name = name;
    s.param = param;
    s.range = r;
    // A view of the owned elements (the kernel updates the parameter itself), or the given master.
    if (const auto m = shard_masters.find(name); m != shard_masters.end()) {
      FP8T_CHECK(m->second.dim() == 1 && m->second.numel() == r.length && m->second.scalar_type() == kStateDtype &&
                     m->second.device() == param.device(),
                 "AdamW: the shard master of '", name, "' must be a flat float32 tensor of its range's length");
      s.master = m->second;
    } else {
      s.master = param.detach().view(-1).narrow(0, r.begin, r.length);
    }
    init_state(s, {r.length}, param.options().requires_grad(false));
    s.decay = param.dim() >= 2;  // of the whole parameter, whatever the range's shape
    if (const auto g = shard_grads.find(name); g != shard_grads.end()) {
      // Its elements may come later (ZeRO-1 points it at each step's gradient shard); step() checks them.
      FP8T_CHECK(g->second.dim() == 1 && g->second.scalar_type() == kStateDtype && g->second.device() == param.device(),
                 "AdamW: the shard gradient of '", name, "' must be a flat float32 tensor on the parameter's device");
      s.shard_grad = g->second;
    }
    slots_.push_back(std::move(s));
  }
}

AdamW::AdamW(NamedParameters params, AdamWOptions options) : options_(options) {
  check_options();
  std::set<std::string> seen;
  std::set<const void*> seen_tensors;
  at::NoGradGuard no_grad;
  for (auto& [name, param] : params) {
    FP8T_CHECK(!name.empty(), "AdamW: parameter names must not be empty");
    FP8T_CHECK(seen.insert(name).second, "AdamW: duplicate parameter name '", name, "'");
    FP8T_CHECK(param.defined(), "AdamW: parameter '", name, "' is undefined");
    // A tensor shared under two names (tied embeddings) is optimized once, under its first name.
    if (!seen_tensors.insert(param.unsafeGetTensorImpl()).second) continue;
    FP8T_CHECK(param.is_floating_point(), "AdamW: parameter '", name, "' is not floating point");
    Slot s;
    s.name = name;
    s.param = param;
    s.separate_master = needs_master_copy(param);
    s.master = s.separate_master
                   ? param.detach().to(kStateDtype, /*non_blocking=*/false, /*copy=*/true)
                         .contiguous()
                   : param;
    init_state(s, s.master.sizes(), s.master.options());
    s.decay = param.dim() >= 2;
    s.range = ParamRange{0, param.numel()};
    slots_.push_back(std::move(s));
  }
}

void AdamW::init_state(Slot& s, at::IntArrayRef shape, const at::TensorOptions& options) const {
  const at::TensorOptions o = options.dtype(at::kFloat).requires_grad(false);
  s.exp_avg = at::zeros(shape, o.dtype(moments_scalar_type(options_.moments_dtype)));
  s.exp_avg_sq = at::zeros_like(s.exp_avg);
  s.bias_state = at::tensor({0.0f, 1.0f, 1.0f}, o.device(at::kCPU)).to(o.device());  // train::adamw::init_state
  s.step = s.bias_state.select(0, 0);  // a view: the checkpoint's "<name>.step" is t itself
}

bool AdamW::needs_master_copy(const at::Tensor& param) {
  return param.scalar_type() != kStateDtype || !param.is_contiguous();
}

struct AdamW::Group {
  at::Device device;
  bool decay;
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, bias_states;
  std::vector<const Slot*> slots;
};

std::vector<AdamW::Group> AdamW::groups() const {
  std::vector<Group> groups;
  for (const Slot& s : slots_) {
    if (s.shard_grad.defined()) {
      FP8T_CHECK(s.shard_grad.numel() == s.range.length, "AdamW: the shard gradient of '", s.name, "' holds ",
                 s.shard_grad.numel(), " elements, its range ", s.range.length, " (no reduced gradients this step?)");
    } else {
      const at::Tensor& full = s.param.grad();
      if (!full.defined()) continue;
      FP8T_CHECK(!full.is_sparse(), "AdamW: sparse gradient for '", s.name, "' is not supported");
      FP8T_CHECK(full.sizes() == s.param.sizes(), "AdamW: gradient of '", s.name, "' has shape ",
                 shape_str(full), ", parameter ", shape_str(s.param));
    }
    const at::Tensor g = s.grad();
    Group* group = nullptr;
    for (Group& candidate : groups) {
      if (candidate.device == s.master.device() && candidate.decay == s.decay) group = &candidate;
    }
    if (group == nullptr) {
      groups.push_back(Group{s.master.device(), s.decay, {}, {}, {}, {}, {}, {}});
      group = &groups.back();
    }
    group->params.push_back(s.master);
    group->grads.push_back(g.to(at::kFloat).contiguous());
    group->exp_avgs.push_back(s.exp_avg);
    group->exp_avg_sqs.push_back(s.exp_avg_sq);
    group->bias_states.push_back(s.bias_state);
    group->slots.push_back(&s);
  }
  return groups;
}

void AdamW::step(double lr, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  update(&lr, at::Tensor(), grad_scale, found_inf);
}

void AdamW::step(const at::Tensor& lr, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  FP8T_CHECK(lr.defined() && lr.dim() == 0 && lr.scalar_type() == at::kFloat,
             "AdamW: a tensor learning rate must be a 0-d float32 tensor");
  update(nullptr, lr, grad_scale, found_inf);
}

void AdamW::update(const double* lr, const at::Tensor& lr_tensor, const at::Tensor& grad_scale,
                   const at::Tensor& found_inf) {
  at::NoGradGuard no_grad;
  for (Group& group : groups()) {
    update_group(group, lr, lr_tensor, grad_scale, found_inf);
    for (const Slot* s : group.slots) {
      if (s->separate_master) s->param.copy_(s->master);
    }
  }
}

void AdamW::update_group(const Group& group, const double* lr, const at::Tensor& lr_tensor,
                         const at::Tensor& grad_scale, const at::Tensor& found_inf) const {
  AdamWStepArgs step;
  step.beta1 = static_cast<float>(options_.beta1);
  step.beta2 = static_cast<float>(options_.beta2);
  step.eps = static_cast<float>(options_.eps);
  step.weight_decay = group.decay ? static_cast<float>(options_.weight_decay) : 0.0f;
  // A host lr is rounded to float32 as the kernel reads it: a tensor holding float(lr) agrees.
  if (lr != nullptr) step.lr_value = static_cast<float>(*lr);
  step.lr = lr == nullptr ? lr_tensor : at::Tensor();
  step.grad_scale = grad_scale;
  step.found_inf = found_inf;
  adamw_multi_tensor_step(
      AdamWBatch{group.params, group.grads, group.exp_avgs, group.exp_avg_sqs, group.bias_states}, step);
}

void AdamW::zero_grad(bool set_to_none) {
  for (Slot& s : slots_) {
    at::Tensor& g = s.param.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g.reset();
    } else {
      if (g.grad_fn()) {
        g = g.detach();
      } else {
        g.requires_grad_(false);
      }
      g.zero_();
    }
  }
}

std::map<std::string, at::Tensor> AdamW::state_dict() const {
  std::map<std::string, at::Tensor> out;
  for (const Slot& s : slots_) {
    out[s.name + ".exp_avg"] = s.exp_avg;
    out[s.name + ".exp_avg_sq"] = s.exp_avg_sq;
    out[s.name + ".step"] = s.step;
    if (s.separate_master) out[s.name + ".master"] = s.master;
  }
  return out;
}

void AdamW::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  const std::map<std::string, at::Tensor> mine = state_dict();
  for (const auto& [key, value] : state) {
    FP8T_INPUT_CHECK(mine.count(key) == 1, "optimizer state has an unexpected key '", key,
                     "' (no such parameter or state in this model)");
  }
  for (const auto& [key, target] : mine) {
    auto it = state.find(key);
    FP8T_INPUT_CHECK(it != state.end(), "optimizer state is missing key '", key, "'");
    const at::Tensor& src = it->second;
    FP8T_INPUT_CHECK(src.defined(), "optimizer state key '", key, "' holds no tensor");
    FP8T_INPUT_CHECK(src.sizes() == target.sizes(), "optimizer state key '", key, "' has shape ",
                     shape_str(src), ", expected ", shape_str(target));
    FP8T_INPUT_CHECK(src.is_floating_point(), "optimizer state key '", key,
                     "' is not a floating-point tensor (", src.scalar_type(), ")");
    if (is_step_key(key)) {
      // The state rebuilds beta^t by t multiplies; float32 counts every integer up to 2^24.
      const double t = src.item<double>();
      FP8T_INPUT_CHECK(t >= 0.0 && t <= 16777216.0 && t == static_cast<double>(static_cast<int64_t>(t)),
                       "optimizer state key '", key, "' holds ", t, ", not a step count");
    }
  }
  at::NoGradGuard no_grad;
  for (const auto& [key, target] : mine) target.copy_(state.at(key));
  const train::adamw::Constants c = train::adamw::make_constants(static_cast<float>(options_.beta1),
                                                                 static_cast<float>(options_.beta2), 0.0f, 0.0f);
  for (const Slot& s : slots_) {
    if (s.separate_master) s.param.copy_(s.master);
    // beta^t by the multiplies the steps would have made.
    const float t = s.step.item<float>();
    float rebuilt[train::adamw::kStateSize];
    train::adamw::state_from_step(rebuilt, t, c);
    s.bias_state.copy_(at::tensor({rebuilt[0], rebuilt[1], rebuilt[2]}, at::kFloat));
  }
}

std::map<std::string, ParamRange> AdamW::ranges() const {
  std::map<std::string, ParamRange> out;
  for (const Slot& s : slots_) out[s.name] = s.range;
  return out;
}

std::vector<std::string> AdamW::decay_names() const {
  std::vector<std::string> out;
  for (const Slot& s : slots_) {
    if (s.decay) out.push_back(s.name);
  }
  return out;
}

std::vector<std::string> AdamW::no_decay_names() const {
  std::vector<std::string> out;
  for (const Slot& s : slots_) {
    if (!s.decay) out.push_back(s.name);
  }
  return out;
}

}  // namespace fp8t::optim
