#include "lib/fp8/fp8_linear.h"

#include <ATen/autocast_mode.h>        // at::autocast
#include <torch/torch.h>               // torch::autograd::Function

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

// The dtype high-precision work runs in: the CUDA autocast dtype when autocast is on.
at::ScalarType activation_dtype(const at::Tensor& x) {
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) return at::autocast::get_autocast_dtype(at::kCUDA);
  return x.scalar_type();
}

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() && a.numel() == b.numel();
}

}  // namespace

// Autograd node of Fp8Linear. Inputs: x [M,K], weight [N,K], bias [N] or undefined.
class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias_opt, Fp8Linear* layer,
                            const Fp8Tensor* given_x_fp8) {
    // Optional tensors go in as std::optional: LibTorch's custom functions reject undefined inputs.
    const at::Tensor bias = bias_opt.value_or(at::Tensor());
    DelayedScaling& scaling = layer->scaling();
    const Recipe& recipe = scaling.recipe();
    const auto& ovr = recipe.override_linear_precision;
    Backend& backend = backend_for(x.device());
    const bool training = layer->is_training() && (x.requires_grad() || weight.requires_grad());
    const at::ScalarType hp = activation_dtype(x);

    // Input: from the preceding norm, or cast here (one pass for both layouts).
    Fp8Tensor x_fp8;
    const bool x_row = !ovr.fprop, x_col = training && !ovr.wgrad;
    const bool given_ok = given_x_fp8 != nullptr && (!x_row || given_x_fp8->rowwise.defined()) &&
                          (!x_col || given_x_fp8->columnwise.defined());
    if (given_ok) {
      x_fp8 = *given_x_fp8;
    } else if (x_row || x_col) {
      const SlotRef slot = scaling.slot(layer->slot_input(), training);
      x_fp8 = backend.quantize(x, slot, x_row, x_col);
      if (training && scaling.collect_stats()) scaling.add_stats(slot.index, backend.saturation_stats(x, slot));
    }
    const Fp8Tensor& w_fp8 = layer->weight_fp8(training, !ovr.fprop, training && !ovr.dgrad);

    at::Tensor y;
    if (ovr.fprop) {
      y = at::linear(x.to(hp), weight.to(hp), bias.defined() ? bias.to(hp) : bias);
    } else {
      y = backend.gemm(x_fp8.rowwise, w_fp8.rowwise, bias, hp, GemmKind::kFprop, recipe.fast_accumulation.fprop);
    }

    if (training) {
      ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
      ctx->saved_data["has_bias"] = bias.defined();
      ctx->saved_data["hp"] = static_cast<int64_t>(hp);
      // Save only what the backward GEMMs read: FP8 copies, or the high-precision operand
      // of an overridden GEMM.
      ctx->save_for_backward({ovr.wgrad ? x : at::Tensor(), ovr.dgrad ? weight : at::Tensor()});
      if (!ovr.wgrad) {
        ctx->saved_data["x_col"] = x_fp8.columnwise.codes;
        ctx->saved_data["x_col_sinv"] = x_fp8.columnwise.scale_inv;
        ctx->saved_data["x_fmt"] = static_cast<int64_t>(x_fp8.columnwise.format);
      }
      if (!ovr.dgrad) {
        ctx->saved_data["w_col"] = w_fp8.columnwise.codes;
        ctx->saved_data["w_col_sinv"] = w_fp8.columnwise.scale_inv;
        ctx->saved_data["w_fmt"] = static_cast<int64_t>(w_fp8.columnwise.format);
      }
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* layer = reinterpret_cast<Fp8Linear*>(ctx->saved_data["layer"].toInt());
    DelayedScaling& scaling = layer->scaling();
    const Recipe& recipe = scaling.recipe();
    const auto& ovr = recipe.override_linear_precision;
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto hp = static_cast<at::ScalarType>(ctx->saved_data["hp"].toInt());
    const auto saved = ctx->get_saved_variables();
    // The gradient may arrive already cast from the following fused activation: then grads[0]
    // is only the carrier of that hand-over (its values are never read).
    Fp8Linear::PendingGrad handed;
    std::swap(handed, layer->pending_grad_);
    const bool use_handed = handed.carrier.defined() && same_storage(handed.carrier, grads[0]);
    const at::Tensor dy = use_handed ? grads[0] : grads[0].contiguous();
    Backend& backend = backend_for(dy.device());

    at::Tensor dbias;
    Fp8Tensor dy_fp8;
    if (use_handed) {
      dy_fp8 = std::move(handed.dy_fp8);
      dbias = handed.dbias;
    } else if (!ovr.dgrad || !ovr.wgrad) {
      const SlotRef slot = scaling.slot(layer->slot_grad_output(), /*record=*/true);
      dy_fp8 = backend.quantize_grad(dy, slot, has_bias, &dbias);
      if (scaling.collect_stats()) scaling.add_stats(slot.index, backend.saturation_stats(dy, slot));
    } else if (has_bias) {
      dbias = dy.to(at::kFloat).sum(0);
    }

    auto operand = [&](const char* codes, const char* sinv, const char* fmt) {
      return Fp8Operand{ctx->saved_data[codes].toTensor(), ctx->saved_data[sinv].toTensor(),
                        static_cast<Format>(ctx->saved_data[fmt].toInt())};
    };

    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      if (ovr.dgrad) {
        dx = at::mm(dy.to(hp), saved[1].to(hp));
      } else {
        dx = backend.gemm(dy_fp8.rowwise, operand("w_col", "w_col_sinv", "w_fmt"), at::Tensor(), hp,
                          GemmKind::kDgrad, recipe.fast_accumulation.dgrad);
      }
    }
    if (ctx->needs_input_grad(1)) {
      if (ovr.wgrad) {
        dw = at::mm(dy.to(hp).t(), saved[0].to(hp)).to(at::kFloat);
      } else {
        dw = backend.gemm(dy_fp8.columnwise, operand("x_col", "x_col_sinv", "x_fmt"), at::Tensor(), at::kFloat,
                          GemmKind::kWgrad, recipe.fast_accumulation.wgrad);
      }
    }
    return {dx, dw, has_bias ? dbias : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

Fp8Linear::Fp8Linear(const model::Linear& src, const std::string& name, std::shared_ptr<DelayedScaling> scaling)
    : in_features(src.in_features), out_features(src.out_features), name_(name), scaling_(std::move(scaling)) {
  weight = register_parameter("weight", src.weight);
  if (src.bias.defined()) bias = register_parameter("bias", src.bias);
  const Recipe& r = scaling_->recipe();
  slot_input_ = scaling_->add_slot(name + ":input", r.forward_format());
  slot_weight_ = scaling_->add_slot(name + ":weight", r.forward_format());
  slot_grad_ = scaling_->add_slot(name + ":grad_output", r.backward_format());
}

void Fp8Linear::set_pending_input(const at::Tensor& y, Fp8Tensor y_fp8) {
  pending_.y = y;
  pending_.y_fp8 = std::move(y_fp8);
}

bool Fp8Linear::needs_input_columnwise(bool training) const {
  return training && !scaling_->recipe().override_linear_precision.wgrad;
}

bool Fp8Linear::takes_fp8_input_only(bool training) const {
  const auto& ovr = scaling_->recipe().override_linear_precision;
  return !ovr.fprop && (!training || !ovr.wgrad);
}

bool Fp8Linear::takes_fp8_grad_only() const {
  const auto& ovr = scaling_->recipe().override_linear_precision;
  return !ovr.dgrad && !ovr.wgrad;
}

void Fp8Linear::set_pending_grad(const at::Tensor& carrier, Fp8Tensor dy_fp8, at::Tensor dbias) {
  pending_grad_.carrier = carrier;
  pending_grad_.dy_fp8 = std::move(dy_fp8);
  pending_grad_.dbias = std::move(dbias);
}

const Fp8Tensor& Fp8Linear::weight_fp8(bool record, bool rowwise, bool columnwise) {
  WeightCache& c = weight_cache_;
  const int64_t version = static_cast<int64_t>(weight._version());
  const bool layouts_ok = (!rowwise || c.fp8.rowwise.defined()) && (!columnwise || c.fp8.columnwise.defined());
  const bool fresh = c.weight_version == version && c.update_count == scaling_->update_count();
  if (fresh && layouts_ok && (c.recorded || !record)) return c.fp8;
  if (!rowwise && !columnwise) {
    c.fp8 = Fp8Tensor{};
    return c.fp8;
  }
  const SlotRef slot = scaling_->slot(slot_weight_, record);
  c.fp8 = backend_for(weight.device()).quantize(weight.detach(), slot, rowwise, columnwise);
  if (record && scaling_->collect_stats()) {
    scaling_->add_stats(slot.index, backend_for(weight.device()).saturation_stats(weight.detach(), slot));
  }
  c.weight_version = version;
  c.update_count = scaling_->update_count();
  c.recorded = record;
  return c.fp8;
}

at::Tensor Fp8Linear::forward(const at::Tensor& x) {
  FP8T_CHECK(x.size(-1) == in_features, "layer ", name_, ": input has ", x.size(-1), " features, expected ",
             in_features);
  const at::Tensor x2 = x.reshape({-1, in_features});
  const Fp8Tensor* given = nullptr;
  Fp8Tensor handed;
  if (same_storage(pending_.y, x)) {
    handed = std::move(pending_.y_fp8);
    given = &handed;
  }
  pending_ = Pending{};
  at::Tensor y = Fp8LinearFunction::apply(x2, weight, optional_tensor(bias), this, given);
  auto out_shape = x.sizes().vec();
  out_shape.back() = out_features;
  return y.view(out_shape);
}

}  // namespace fp8
}  // namespace fp8t
