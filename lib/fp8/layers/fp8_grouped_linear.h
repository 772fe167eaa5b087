// Fp8GroupedLinear: a grouped Linear (model::GroupedLinear, weight [G, N, K]: a mixture of experts'
// experts) with all three GEMMs in FP8 under the model's recipe, as grouped GEMMs over the row
// groups (Backend::grouped_gemm, grouped_gemm_wgrad):
//
//   fprop  y  = x . W_g^T    x [M, K] (slot "input") x the weight [G*N, K] (slot "weight")
//   dgrad  dx = dy . W_g     dy [M, N] (slot "grad_output") x the weight's columnwise copy [K, G*N]
//   wgrad  dW_g = dy_g^T x_g the columnwise copies of dy and x, grouped along the tokens
//
// Every slot is E4M3, gradients included: the grouped kernel takes E4M3 only (HYBRID's E5M2
// gradients do not apply to the experts). Per-tensor recipes (delayed, current) give one scale per
// tensor, passed to the kernel as a constant vector; the row-wise recipe gives one scale per row of
// each operand, with the columnwise copies' scales per feature over all groups (not per group): x's
// and dy's over every expert's tokens, the weight's over every expert's rows. Both weight copies
// come from one cast of the [G*N, K] weight, once per optimizer step, as Fp8Linear's. The output is BF16 on the GPU (the kernel's), and wgrad's BF16 sums are widened to
// the FP32 gradient.
#pragma once

#include <memory>  // std::shared_ptr
#include <string>  // std::string

#include "lib/fp8/backends/backend.h"  // Fp8Operand
#include "lib/fp8/recipes/scaling.h"   // Scaling
#include "lib/model/layers.h"          // model::GroupedLinear, model::GroupedModule

namespace fp8t {
namespace fp8 {

// What the backward of a grouped layer reads besides its saved operands (held by each autograd
// node, so that a backward after the layer was replaced still finds it).
struct Fp8GroupedGradState : torch::CustomClassHolder {
  std::shared_ptr<Scaling> scaling;
  int slot_grad = -1;
};

class Fp8GroupedLinear : public model::GroupedModule {
 public:
  // Shares src's weight (same tensor, same parameter name). Registers "<name>:input", ":weight",
  // ":grad_output" in `scaling`, all E4M3.
  Fp8GroupedLinear(const model::GroupedLinear& src, const std::string& name, std::shared_ptr<Scaling> scaling);

  at::Tensor forward(const at::Tensor& x, const at::Tensor& offsets) override;

  // The weight's FP8 copies, cast from its [G*N, K] view at most once per (weight version,
  // scaling epoch): rowwise (fprop) and, when `columnwise`, the columnwise copy [K, G*N] whose
  // column blocks are the experts' W_g^T (dgrad).
  const Fp8Tensor& weight_fp8(bool record, bool columnwise);

  const std::string& layer_name() const { return name_; }
  Scaling& scaling() const { return *scaling_; }
  const c10::intrusive_ptr<Fp8GroupedGradState>& grad_state() const { return grad_; }
  int slot_input() const { return slot_input_; }
  int slot_weight() const { return slot_weight_; }
  int slot_grad_output() const { return slot_grad_; }

  int64_t groups;
  int64_t in_features;
  int64_t out_features;
  double rows_per_token;
  at::Tensor weight;  // [G, N, K]

 private:
  std::string name_;
  std::shared_ptr<Scaling> scaling_;
  int slot_input_, slot_weight_, slot_grad_;
  c10::intrusive_ptr<Fp8GroupedGradState> grad_;
  struct WeightCache {
    Fp8Tensor fp8;
    int64_t weight_version = -1;
    int64_t epoch = -1;
    bool recorded = false;
  } cache_;
};

}  // namespace fp8
}  // namespace fp8t
