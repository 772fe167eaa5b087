#include "lib/optim/grad_clip.h"

#include <algorithm>  // std::find_if
#include <iterator>   // std::prev
#include <utility>    // std::pair

#include <ATen/ATen.h>            // at::_foreach_norm, at::_foreach_mul_, at::stack
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not in ATen.h without the precompiled header)

#include "lib/dist/communicator.h"  // dist::Communicator
#include "lib/util/error.h"         // FP8T_CHECK

namespace fp8t::optim {

namespace {

using DeviceGrads = std::vector<std::pair<at::Device, std::vector<at::Tensor>>>;

// Gradients grouped by device, in first-seen order; *any_double when one is float64.
DeviceGrads grads_by_device(const std::vector<at::Tensor>& params, bool* any_double) {
  DeviceGrads by_device;
  for (const at::Tensor& p : params) {
    if (!p.defined()) continue;
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    FP8T_CHECK(!g.is_sparse(), "clip_grad_norm_: sparse gradients are not supported");
    *any_double = *any_double || g.scalar_type() == at::kDouble;
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& entry) { return entry.first == g.device(); });
    if (it == by_device.end()) {
      by_device.emplace_back(g.device(), std::vector<at::Tensor>{});
      it = std::prev(by_device.end());
    }
    it->second.push_back(g);
  }
  return by_device;
}

at::Tensor total_norm(const DeviceGrads& by_device, bool any_double) {
  const at::ScalarType norm_type = any_double ? at::kDouble : at::kFloat;
  if (by_device.empty()) return at::zeros({}, at::TensorOptions().dtype(norm_type));
  const at::Device first = by_device.front().first;
  std::vector<at::Tensor> device_norms;
  for (const auto& [device, grads] : by_device) {
    // dtype: accumulate in float32 (float64 for double grads) whatever the grads' dtype is.
    std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2, norm_type);
    device_norms.push_back(at::stack(norms).norm(2).to(first));
  }
  return device_norms.size() == 1 ? device_norms.front() : at::stack(device_norms).norm(2);
}

}  // namespace

at::Tensor global_grad_norm(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  bool any_double = false;
  return total_norm(grads_by_device(params, &any_double), any_double);
}

at::Tensor sharded_grad_norm(const std::vector<at::Tensor>& shards, dist::Communicator& comm) {
  at::NoGradGuard no_grad;
  FP8T_CHECK(!shards.empty(), "sharded_grad_norm: no shards");
  const std::vector<at::Tensor> norms = at::_foreach_norm(shards, 2, at::kFloat);
  const at::Tensor squares = at::stack(norms).square().sum().reshape({1});  // 1-D for the collective
  comm.all_reduce(squares, dist::ReduceOp::kSum);
  return squares.sqrt().reshape({});
}

at::Tensor clip_divisor(const at::Tensor& norm, double max_norm) {
  FP8T_CHECK(max_norm > 0.0, "clip_divisor: max_norm must be > 0, got ", max_norm);
  at::NoGradGuard no_grad;
  return (norm.to(at::kFloat) + 1e-6).div_(max_norm).clamp_min_(1.0);
}

at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  bool any_double = false;
  DeviceGrads by_device = grads_by_device(params, &any_double);
  const at::Tensor total = total_norm(by_device, any_double);
  if (max_norm > 0.0 && !by_device.empty()) {
    // max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_, clamped to 1 on the device.
    const at::Tensor coef = at::full_like(total, max_norm).div_(total + 1e-6).clamp_max_(1.0);
    for (auto& [device, grads] : by_device) {
      at::_foreach_mul_(grads, coef.to(device));
    }
  }
  return total;
}

}  // namespace fp8t::optim
