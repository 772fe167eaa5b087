#include "lib/fp8/layers/fp8_grouped_linear.h"

#include <torch/torch.h>  // torch::autograd::Function

#include "lib/fp8/layers/saved_operand.h"  // save_operand, saved_operand
#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::autocast_dtype_or, to_ivalue, from_ivalue

namespace fp8t {
namespace fp8 {

// Autograd node of Fp8GroupedLinear. Inputs: x [M, K], weight [G, N, K], offsets int32 [G]. The
// forward saves x's columnwise FP8 copy and the dgrad weight operand, not x.
class Fp8GroupedLinearFunction : public torch::autograd::Function<Fp8GroupedLinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& offsets, Fp8GroupedLinear* layer) {
    Scaling& scaling = layer->scaling();
    const bool training = layer->is_training() && (x.requires_grad() || weight.requires_grad());
    const at::ScalarType hp = compat::autocast_dtype_or(x.device().type(), x.scalar_type());
    CastOptions opt;
    opt.columnwise = training;
    opt.record = training;
    const Fp8Tensor x_fp8 = scaling.quantize(layer->slot_input(), CastSource::tensor(x), opt);
    const Fp8Tensor& w = layer->weight_fp8(training, training);
    const at::Tensor y = backend_for(x.device())
                             .grouped_gemm(x_fp8.rowwise, w.rowwise, offsets, hp, GemmKind::kFprop,
                                           scaling.fast_accumulation(GemmKind::kFprop), GroupedOperands::kStackedRows);
    if (training) {
      ctx->saved_data["grad_state"] = compat::to_ivalue(layer->grad_state());
      ctx->saved_data["hp"] = static_cast<int64_t>(hp);
      save_operand(ctx, "x", x_fp8.columnwise);
      save_operand(ctx, "w", w.columnwise);
      ctx->save_for_backward({offsets});
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto state = compat::from_ivalue<Fp8GroupedGradState>(ctx->saved_data["grad_state"]);
    const Scaling& scaling = *state->scaling;
    const auto hp = static_cast<at::ScalarType>(ctx->saved_data["hp"].toInt());
    const at::Tensor offsets = ctx->get_saved_variables()[0];
    CastOptions opt;
    opt.columnwise = true;
    const Fp8Tensor dy = state->scaling->quantize(state->slot_grad, CastSource::tensor(grads[0].contiguous()), opt);
    Backend& backend = backend_for(grads[0].device());
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      dx = backend.grouped_gemm(dy.rowwise, saved_operand(ctx, "w"), offsets, hp, GemmKind::kDgrad,
                                scaling.fast_accumulation(GemmKind::kDgrad), GroupedOperands::kStackedColumns);
    }
    if (ctx->needs_input_grad(1)) {
      dw = backend.grouped_gemm_wgrad(dy.columnwise, saved_operand(ctx, "x"), offsets,
                                      scaling.fast_accumulation(GemmKind::kWgrad))
               .to(at::kFloat);
    }
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

Fp8GroupedLinear::Fp8GroupedLinear(const model::GroupedLinear& src, const std::string& name,
                                   std::shared_ptr<Scaling> scaling)
    : groups(src.groups),
      in_features(src.in_features),
      out_features(src.out_features),
      rows_per_token(src.rows_per_token),
      name_(name),
      scaling_(std::move(scaling)) {
  weight = register_parameter("weight", src.weight);
  slot_input_ = scaling_->add_slot(name + ":input", Format::kE4M3, TensorRole::kInput);
  slot_weight_ = scaling_->add_slot(name + ":weight", Format::kE4M3, TensorRole::kWeight);
  slot_grad_ = scaling_->add_slot(name + ":grad_output", Format::kE4M3, TensorRole::kGradOutput);
  grad_ = c10::make_intrusive<Fp8GroupedGradState>();
  grad_->scaling = scaling_;
  grad_->slot_grad = slot_grad_;
}

const Fp8Tensor& Fp8GroupedLinear::weight_fp8(bool record, bool columnwise) {
  WeightCache& c = cache_;
  const auto version = static_cast<int64_t>(weight._version());
  const bool fresh = c.weight_version == version && c.epoch == scaling_->weight_epoch();
  if (fresh && (c.recorded || !record) && (!columnwise || c.fp8.columnwise.defined())) return c.fp8;
  // Both layouts from one read of the weight, as a 2-D [G*N, K] tensor: the columnwise copy
  // [K, G*N] holds every W_g^T as a block of columns (dgrad's operands, read in place).
  CastOptions opt;
  opt.columnwise = columnwise;
  opt.record = record;
  const at::Tensor w = weight.detach().view({groups * out_features, in_features});
  c.fp8 = scaling_->quantize(slot_weight_, CastSource::tensor(w), opt);
  c.weight_version = version;
  c.epoch = scaling_->weight_epoch();
  c.recorded = record && !NoRecordScope::active();
  return c.fp8;
}

at::Tensor Fp8GroupedLinear::forward(const at::Tensor& x, const at::Tensor& offsets) {
  FP8T_CHECK(x.dim() == 2 && x.size(1) == in_features, "grouped layer ", name_, ": input ", x.sizes(), ", expected [rows, ",
             in_features, "]");
  FP8T_CHECK(offsets.numel() == groups, "grouped layer ", name_, ": ", offsets.numel(), " group ends for ", groups,
             " groups");
  return Fp8GroupedLinearFunction::apply(x.contiguous(), weight, offsets, this);
}

}  // namespace fp8
}  // namespace fp8t
