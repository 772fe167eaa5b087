#include "lib/model/layers.h"

#include "lib/ops/rms_norm.h"       // ops::rms_norm
#include "lib/ops/add_norm.h"       // ops::add_norm, ops::add_norm_fused
#include "lib/ops/grouped_linear.h" // ops::grouped_linear
#include "lib/ops/linear.h"         // ops::linear
#include "lib/ops/swiglu.h"         // ops::swiglu
#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::autocast_dtype_or

namespace fp8t {
namespace model {

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  weight = register_parameter("weight", torch::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
  torch::NoGradGuard no_grad;
  weight.normal_(0.0, 0.02);
}

Linear::Linear(const at::Tensor& shared_weight)
    : in_features(shared_weight.size(1)), out_features(shared_weight.size(0)) {
  weight = register_parameter("weight", shared_weight);
}

at::Tensor Linear::forward(const at::Tensor& x) { return ops::linear(x, weight, bias); }

GroupedLinear::GroupedLinear(int64_t g, int64_t in, int64_t out, double per_token)
    : groups(g), in_features(in), out_features(out), rows_per_token(per_token) {
  weight = register_parameter("weight", torch::empty({g, out, in}));
  torch::NoGradGuard no_grad;
  weight.normal_(0.0, 0.02);
}

void GroupedLinear::keep_groups(int64_t first, int64_t count) {
  FP8T_CHECK(first >= 0 && count > 0 && first + count <= groups, "grouped linear: groups [", first, ", ",
             first + count, ") of ", groups);
  torch::NoGradGuard no_grad;
  weight.set_data(weight.narrow(0, first, count).clone());
  groups = count;
}

at::Tensor GroupedLinear::forward(const at::Tensor& x, const at::Tensor& offsets) {
  return ops::grouped_linear(x, weight, offsets);
}

Norm::Norm(Kind k, int64_t d, double e, bool with_bias) : kind(k), dim(d), eps(e) {
  weight = register_parameter("weight", torch::ones({d}));
  if (with_bias && kind == Kind::kLayerNorm) bias = register_parameter("bias", torch::zeros({d}));
}

at::Tensor Norm::forward(const at::Tensor& x) {
  if (kind == Kind::kLayerNorm) return at::layer_norm(x, {dim}, weight, bias, eps);
  return ops::rms_norm(x, weight, eps).y;
}

AddNormOutput Norm::forward_add(const at::Tensor& x, const at::Tensor& h) {
  // Unfused, the consumer Linear would round y to its autocast dtype; the kernel rounds it once.
  const at::ScalarType y_dtype =
      fused_output_autocast ? compat::autocast_dtype_or(x.device().type(), x.scalar_type()) : x.scalar_type();
  if (ops::add_norm_fused(x, h, y_dtype)) {
    const ops::AddNormResult r = ops::add_norm(x, h, weight, bias, eps, kind == Kind::kRMSNorm, y_dtype);
    return {r.sum, r.y};
  }
  const at::Tensor r = x + h;
  return {r, forward(r)};
}

at::Tensor Activation::forward(const at::Tensor& x) {
  if (kind == Kind::kGeluTanh) return at::gelu(x, "tanh");
  if (ops::swiglu_fused(x)) return ops::swiglu(x);  // one kernel each way on the GPU
  const auto parts = x.chunk(2, -1);
  return at::silu(parts[0]) * parts[1];
}

std::shared_ptr<UnaryModule> SlotModule::slot(const std::string& name) const {
  for (const Slot& s : slots_) {
    if (s.name == name) return *s.member;
  }
  FP8T_CHECK(false, "module has no slot '", name, "'");
  return nullptr;
}

void SlotModule::replace_slot(const std::string& name, std::shared_ptr<UnaryModule> replacement) {
  for (Slot& s : slots_) {
    if (s.name != name) continue;
    replace_module(name, replacement);
    *s.member = std::move(replacement);
    return;
  }
  FP8T_CHECK(false, "module has no slot '", name, "'");
}

void SlotModule::replace_grouped_slot(const std::string& name, std::shared_ptr<GroupedModule> replacement) {
  for (GroupedSlot& s : grouped_slots_) {
    if (s.name != name) continue;
    replace_module(name, replacement);
    *s.member = std::move(replacement);
    return;
  }
  FP8T_CHECK(false, "module has no grouped slot '", name, "'");
}

void SlotModule::add_grouped_slot(const std::string& name, std::shared_ptr<GroupedModule> module,
                                  std::shared_ptr<GroupedModule>* member) {
  *member = register_module(name, std::move(module));
  grouped_slots_.push_back(GroupedSlot{name, member});
}

void SlotModule::add_slot(const std::string& name, std::shared_ptr<UnaryModule> module,
                          std::shared_ptr<UnaryModule>* member, const std::string& feeds,
                          const std::string& fed_by, bool input_kept_by_producer) {
  *member = register_module(name, std::move(module));
  slots_.push_back(Slot{name, member, feeds, fed_by, input_kept_by_producer});
}

}  // namespace model
}  // namespace fp8t
