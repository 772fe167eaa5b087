// Global-norm gradient clipping without a host sync.
#pragma once

#include <vector>  // std::vector

#include <ATen/core/Tensor.h>  // at::Tensor

namespace fp8t::dist {
class Communicator;
}  // namespace fp8t::dist

namespace fp8t::optim {

// Computes the total L2 norm of the gradients of `params` (parameters whose grad is undefined
// are skipped): one at::_foreach_norm launch per device, the per-device norms combined on the
// device of the first gradient. When max_norm > 0, scales every gradient in place by
//   min(1, max_norm / (norm + 1e-6))
// using tensor ops only (the norm is never read on the host, so no device sync). When
// max_norm <= 0 the gradients are left untouched.
//
// Returns the 0-d norm (float32, or float64 when the gradients are float64), before clipping.
// A non-finite norm is returned as is (the gradients then become non-finite or zero); the
// caller decides what to do. With no gradients at all, returns a 0-d zero on the CPU.
at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm);

// The measuring half of clip_grad_norm_: the total L2 norm, gradients untouched.
at::Tensor global_grad_norm(const std::vector<at::Tensor>& params);

// ZeRO-1: the global L2 norm of gradients whose disjoint parts `shards` (flat tensors) are
// spread over the ranks of `comm`: the squared norms of this rank's shards summed on the
// device, one SUM all-reduce, the square root. The same 0-d float32 on every rank.
at::Tensor sharded_grad_norm(const std::vector<at::Tensor>& shards, dist::Communicator& comm);

// The clipping as a divisor, for an optimizer that divides the gradients as it reads them
// (AdamW::step's grad_scale): max(1, (norm + 1e-6) / max_norm) as a 0-d float32 tensor on the
// norm's device, computed there (no host sync). Dividing by it equals clip_grad_norm_'s scaling
// up to rounding, and saves the separate read-modify-write pass over every gradient.
// Requires max_norm > 0.
at::Tensor clip_divisor(const at::Tensor& norm, double max_norm);

}  // namespace fp8t::optim
