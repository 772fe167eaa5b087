#include "lib/fp8/backends/swiglu_ops.h"

#include <vector>  // std::vector

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

std::vector<at::Tensor> halves(const at::Tensor& h) {
  FP8T_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "SwiGLU input ", h.sizes(), " has no [gate | up] halves (odd last dim)");
  return h.chunk(2, -1);
}

}  // namespace

at::Tensor swiglu_value(const at::Tensor& h) {
  const std::vector<at::Tensor> gate_up = halves(h);
  return at::silu(gate_up[0]) * gate_up[1];
}

at::Tensor swiglu_gradient(const at::Tensor& dy_in, const at::Tensor& h) {
  const std::vector<at::Tensor> gate_up = halves(h);
  const at::Tensor dy = dy_in.to(h.scalar_type());
  // Autograd of silu(gate) * up: MulBackward gives dy * up and dy * silu(gate), SiluBackward
  // turns the first into dgate, and the chunk's backward concatenates the halves.
  const at::Tensor dgate = at::silu_backward(dy * gate_up[1], gate_up[0]);
  const at::Tensor dup = dy * at::silu(gate_up[0]);
  return at::cat({dgate, dup}, -1);
}

}  // namespace fp8
}  // namespace fp8t
