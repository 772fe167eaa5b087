#include "lib/fp8/layers/fp8_linear.h"

#include <torch/torch.h>  // torch::autograd::Function

#include "lib/fp8/layers/saved_operand.h"  // save_operand, saved_operand
#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::autocast_dtype_or

namespace fp8t {
namespace fp8 {

namespace {

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() && a.numel() == b.numel();
}

}  // namespace

// Autograd node of Fp8Linear. Inputs: x [M,K], weight [N,K], bias [N] or undefined. The backward
// never touches the layer: it reads the saved FP8 copies and the layer's Fp8LinearGradState, which
// the context holds a reference to.
class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  // recast_x: the backward casts x's columnwise copy from x itself (Fp8Linear::recasts_input_columnwise;
  // the caller checked that x is a view of what its producer keeps). gradient_producer (nullable):
  // see Fp8Linear::set_pending_input.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias_opt, Fp8Linear* layer,
                            const Fp8Tensor* given_x_fp8, const CastSource* x_columnwise_later, bool recast_x,
                            const c10::intrusive_ptr<Fp8LinearGradState>* gradient_producer) {
    // Optional tensors go in as std::optional: LibTorch's custom functions reject undefined inputs.
    const at::Tensor bias = bias_opt.value_or(at::Tensor());
    const auto& ovr = layer->scaling().recipe().override_linear_precision;
    const bool training = layer->is_training() && (x.requires_grad() || weight.requires_grad());
    const at::ScalarType hp = compat::autocast_dtype_or(x.device().type(), x.scalar_type());
    // Only a recorded rowwise cast (fprop in FP8) leaves a scale for the backward's recast.
    recast_x = recast_x && training && given_x_fp8 == nullptr && !ovr.fprop && !ovr.wgrad;
    const Fp8Tensor x_fp8 = input_fp8(*layer, x, given_x_fp8, x_columnwise_later, training, recast_x);
    // transposes_weight: dgrad transposes the rowwise codes, so the cache needs them even when
    // fprop runs in high precision.
    const bool dgrad_fp8 = training && !ovr.dgrad;
    const bool gathered = layer->gathered_weight() != nullptr;
    const bool w_transpose = dgrad_fp8 && (layer->transposes_weight() || gathered);
    const Fp8Tensor w_fp8 =
        gathered ? gathered_weight(*layer) : layer->weight_fp8(training, !ovr.fprop || w_transpose, dgrad_fp8 && !w_transpose);

    at::Tensor y;
    if (ovr.fprop) {
      y = at::linear(x.to(hp), weight.to(hp), bias.defined() ? bias.to(hp) : bias);
    } else {
      y = backend_for(x.device()).gemm(x_fp8.rowwise, w_fp8.rowwise, bias, hp, GemmKind::kFprop,
                                       layer->scaling().fast_accumulation(GemmKind::kFprop));
    }
    if (training) {
      save_for_backward(ctx, *layer, x, weight, bias.defined(), hp, recast_x);
      save_input_operand(ctx, *layer, x_fp8, x_columnwise_later, recast_x);
      if (gradient_producer != nullptr && !x_fp8.columnwise.defined() && ctx->saved_data.count("x_scale") != 0) {
        ctx->saved_data["x_gradient_producer"] = compat::to_ivalue(*gradient_producer);
      }
      if (gathered) {
        ctx->saved_data["w_gathered"] = true;  // read from the layer's GatheredWeight in the backward
      } else {
        save_weight_operand(ctx, *layer, w_fp8, w_transpose);
      }
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto state = compat::from_ivalue<Fp8LinearGradState>(ctx->saved_data["grad_state"]);
    const Scaling& scaling = *state->scaling;
    const auto& ovr = scaling.recipe().override_linear_precision;
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto hp = static_cast<at::ScalarType>(ctx->saved_data["hp"].toInt());
    const auto saved = ctx->get_saved_variables();
    at::Tensor dbias;
    const GradInput g = grad_input(*state, grads[0], has_bias, &dbias);
    Backend& backend = backend_for(g.dy.device());

    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      if (ovr.dgrad) {
        dx = at::mm(g.dy.to(hp), saved[1].to(hp));
      } else {
        dx = backend.gemm(g.dy_fp8.rowwise, saved_weight_columnwise(ctx, *state), at::Tensor(), hp, GemmKind::kDgrad,
                          scaling.fast_accumulation(GemmKind::kDgrad));
      }
    }
    if (ctx->needs_input_grad(1)) {
      if (ovr.wgrad) {
        dw = at::mm(g.dy.to(hp).t(), saved[0].to(hp)).to(at::kFloat);
      } else {
        Fp8Operand x_col = cast_producer_gradient(ctx, *state, dx);
        if (!x_col.defined()) x_col = saved_input_columnwise(ctx, *state, saved[0]);
        dw = backend.gemm(g.dy_fp8.columnwise, x_col, at::Tensor(), at::kFloat, GemmKind::kWgrad,
                          scaling.fast_accumulation(GemmKind::kWgrad));
      }
    }
    return {dx,          dw,          has_bias ? dbias : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }

 private:
  // The FP8 input: handed over by the preceding norm or activation (the columnwise copy possibly
  // left to the backward), or cast here (one pass for both layouts, or the rowwise one alone when
  // the backward recasts the columnwise copy from x).
  static Fp8Tensor input_fp8(Fp8Linear& layer, const at::Tensor& x, const Fp8Tensor* given,
                             const CastSource* columnwise_later, bool training, bool recast_x) {
    const auto& ovr = layer.scaling().recipe().override_linear_precision;
    const bool x_row = !ovr.fprop, x_col = training && !ovr.wgrad && !recast_x;
    if (given != nullptr && (!x_row || given->rowwise.defined()) &&
        (!x_col || given->columnwise.defined() || columnwise_later != nullptr)) {
      return *given;
    }
    if (!x_row && !x_col) return Fp8Tensor{};
    CastOptions opt;
    opt.rowwise = x_row;
    opt.columnwise = x_col;
    opt.record = training;
    return layer.scaling().quantize(layer.slot_input(), CastSource::tensor(x), opt);
  }

  // Saves only what the backward GEMMs read (save_input_operand, save_weight_operand: FP8 copies,
  // or what they are made from), the high-precision operands of overridden GEMMs (x also for
  // recast_x: a view of what its producer keeps), and a reference to the layer's gradient state.
  static void save_for_backward(torch::autograd::AutogradContext* ctx, const Fp8Linear& layer, const at::Tensor& x,
                                const at::Tensor& weight, bool has_bias, at::ScalarType hp, bool recast_x) {
    const auto& ovr = layer.scaling().recipe().override_linear_precision;
    ctx->saved_data["grad_state"] = compat::to_ivalue(layer.grad_state());
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["hp"] = static_cast<int64_t>(hp);
    if (recast_x) ctx->saved_data["x_recast"] = true;
    ctx->save_for_backward({ovr.wgrad || recast_x ? x : at::Tensor(), ovr.dgrad ? weight : at::Tensor()});
  }

  // wgrad's x^T: the columnwise copy, or what the backward casts it from (the activation's input
  // handed over with the pending input, or x itself) with the scale of the forward's cast.
  static void save_input_operand(torch::autograd::AutogradContext* ctx, const Fp8Linear& layer,
                                 const Fp8Tensor& x_fp8, const CastSource* x_columnwise_later, bool recast_x) {
    if (layer.scaling().recipe().override_linear_precision.wgrad) return;
    if (x_fp8.columnwise.defined()) {
      save_operand(ctx, "x", x_fp8.columnwise);
      return;
    }
    FP8T_CHECK(x_columnwise_later != nullptr || recast_x, "fp8 linear ", layer.layer_name(),
               ": no columnwise FP8 input for wgrad");
    if (x_columnwise_later != nullptr) {
      ctx->saved_data["x_later_op"] = static_cast<int64_t>(x_columnwise_later->op);
      ctx->saved_data["x_later"] = x_columnwise_later->x;  // the activation saves the same tensor
    }
    const at::Tensor scale = layer.scaling().recast_scale(layer.slot_input());
    if (scale.defined()) ctx->saved_data["x_scale"] = scale;
  }

  // dgrad's W^T: the cached columnwise copy, or the cached rowwise one that dgrad transposes.
  static void save_weight_operand(torch::autograd::AutogradContext* ctx, const Fp8Linear& layer,
                                  const Fp8Tensor& w_fp8, bool transpose) {
    if (layer.scaling().recipe().override_linear_precision.dgrad) return;
    save_operand(ctx, "w", transpose ? w_fp8.rowwise : w_fp8.columnwise);
    if (transpose) ctx->saved_data["w_transpose"] = true;
  }


  // wgrad's x^T: kept from the forward, or cast now from the value the activation handed over or
  // from x (saved_x) with the forward's scale (same codes: the recipe's cast under NoRecordScope
  // records nothing; block scaling finds the same blocks in the same values).
  static Fp8Operand saved_input_columnwise(torch::autograd::AutogradContext* ctx, const Fp8LinearGradState& state,
                                           const at::Tensor& saved_x) {
    const auto later = ctx->saved_data.find("x_later");
    CastSource src;
    if (later != ctx->saved_data.end()) {
      src = CastSource{static_cast<CastOp>(ctx->saved_data["x_later_op"].toInt()), later->second.toTensor(),
                       at::Tensor()};
    } else if (ctx->saved_data.count("x_recast") != 0) {
      src = CastSource::tensor(saved_x);
    } else {
      return saved_operand(ctx, "x");
    }
    const NoRecordScope no_record;
    CastOptions opt;
    opt.rowwise = false;
    opt.columnwise = true;
    opt.record = false;
    const auto scale = ctx->saved_data.find("x_scale");
    if (scale != ctx->saved_data.end()) opt.scale = scale->second.toTensor();
    return state.scaling->quantize(state.slot_input, src, opt).columnwise;
  }

  // After a fused SwiGLU whose wgrad copy this backward takes from the producer's gradient cast
  // (Fp8Activation::value_copy_from_gradient_cast): that cast of dx, the SwiGLU gradient at the
  // saved h = [gate | up], left for the activation's backward (cast_by_consumer), and the value's
  // columnwise codes it wrote with the forward's scale, returned. Undefined when the forward did
  // not arrange it or the producer no longer reads FP8 gradients only (then the caller recasts).
  static Fp8Operand cast_producer_gradient(torch::autograd::AutogradContext* ctx, const Fp8LinearGradState& state,
                                           const at::Tensor& dx) {
    const auto found = ctx->saved_data.find("x_gradient_producer");
    if (found == ctx->saved_data.end() || !dx.defined()) return Fp8Operand{};
    Fp8LinearGradState& producer = *compat::from_ivalue<Fp8LinearGradState>(found->second);
    if (!producer.takes_fp8_grad_only()) return Fp8Operand{};
    Fp8Operand value_col;
    Fp8LinearGradState::PendingGrad cast;
    CastOptions opt;
    opt.columnwise = true;
    opt.dbias = producer.has_bias ? &cast.dbias : nullptr;
    opt.value_columnwise = &value_col;
    opt.value_scale = ctx->saved_data["x_scale"].toTensor();
    opt.value_format = state.scaling->slot_format(state.slot_input);
    const at::Tensor h = ctx->saved_data["x_later"].toTensor();
    cast.dy_fp8 = producer.scaling->quantize(producer.slot_grad, CastSource::dswiglu(dx, h), opt);
    cast.carrier = dx;
    producer.cast_by_consumer = std::move(cast);
    return value_col;
  }

  // The gathered weight's codes (GatheredWeight), which must be there while the layer computes.
  static Fp8Tensor gathered_weight(const Fp8Linear& layer) {
    const GatheredWeight& g = *layer.gathered_weight();
    FP8T_CHECK(g.rowwise.defined(), "fp8 linear ", layer.layer_name(), ": its sharded weight is not gathered");
    return Fp8Tensor{g.rowwise, Fp8Operand{}};
  }

  // dgrad's W^T: the kept columnwise copy, or the transpose of the rowwise codes (the same bits),
  // alive until the GEMM has read it; a gathered weight's codes as the holder gathered them again.
  static Fp8Operand saved_weight_columnwise(torch::autograd::AutogradContext* ctx, const Fp8LinearGradState& state) {
    if (ctx->saved_data.count("w_gathered") != 0) {
      FP8T_CHECK(state.gathered && state.gathered->rowwise.defined(),
                 "fp8 linear: its sharded weight is not gathered for the backward");
      return transposed(state.gathered->rowwise);
    }
    const Fp8Operand w = saved_operand(ctx, "w");
    return ctx->saved_data.count("w_transpose") != 0 ? transposed(w) : w;
  }


  // The output gradient in high precision and in FP8 (with dbias when has_bias).
  struct GradInput {
    at::Tensor dy;
    Fp8Tensor dy_fp8;
  };

  // The gradient may arrive already cast from the following fused activation: then `grad` is only
  // the carrier of that hand-over (its values are never read).
  static GradInput grad_input(Fp8LinearGradState& state, const at::Tensor& grad, bool has_bias, at::Tensor* dbias) {
    const auto& ovr = state.scaling->recipe().override_linear_precision;
    Fp8LinearGradState::PendingGrad handed;
    std::swap(handed, state.pending);
    if (handed.carrier.defined() && same_storage(handed.carrier, grad)) {
      *dbias = handed.dbias;
      return {grad, std::move(handed.dy_fp8)};
    }
    GradInput g{grad.contiguous(), Fp8Tensor{}};
    if (!ovr.dgrad || !ovr.wgrad) {
      CastOptions opt;
      opt.columnwise = true;
      opt.dbias = has_bias ? dbias : nullptr;
      g.dy_fp8 = state.scaling->quantize(state.slot_grad, CastSource::tensor(g.dy), opt);
    } else if (has_bias) {
      *dbias = g.dy.to(at::kFloat).sum(0);
    }
    return g;
  }
};

bool Fp8LinearGradState::takes_fp8_grad_only() const {
  const auto& ovr = scaling->recipe().override_linear_precision;
  return !ovr.dgrad && !ovr.wgrad;
}

Fp8Linear::Fp8Linear(const model::Linear& src, const std::string& name, std::shared_ptr<Scaling> scaling)
    : in_features(src.in_features), out_features(src.out_features), name_(name), scaling_(std::move(scaling)) {
  weight = register_parameter("weight", src.weight);
  if (src.bias.defined()) bias = register_parameter("bias", src.bias);
  slot_input_ = scaling_->add_slot(name + ":input", TensorRole::kInput);
  slot_weight_ = scaling_->add_slot(name + ":weight", TensorRole::kWeight);
  slot_grad_ = scaling_->add_slot(name + ":grad_output", TensorRole::kGradOutput);
  grad_ = c10::make_intrusive<Fp8LinearGradState>();
  grad_->scaling = scaling_;
  grad_->slot_input = slot_input_;
  grad_->slot_grad = slot_grad_;
  grad_->has_bias = bias.defined();
}

void Fp8Linear::set_gathered_weight(std::shared_ptr<GatheredWeight> gathered) {
  const auto& ovr = scaling_->recipe().override_linear_precision;
  FP8T_CHECK(!gathered || (!ovr.fprop && !ovr.dgrad), "fp8 linear ", name_, ": a gathered FP8 weight needs fprop "
             "and dgrad in FP8 (fp8.override_linear_precision)");
  grad_->gathered = std::move(gathered);
}

void Fp8Linear::set_pending_input(const at::Tensor& y, Fp8Tensor y_fp8, std::optional<CastSource> columnwise_later,
                                  c10::intrusive_ptr<Fp8LinearGradState> gradient_producer) {
  FP8T_CHECK(!gradient_producer || (columnwise_later && columnwise_later->op == CastOp::kSwiglu), "fp8 linear ", name_,
             ": a producer's gradient cast goes with a SwiGLU input whose wgrad copy is left to the backward");
  pending_.y = y;
  pending_.y_fp8 = std::move(y_fp8);
  pending_.columnwise_later = std::move(columnwise_later);
  pending_.gradient_producer = std::move(gradient_producer);
}

bool Fp8Linear::needs_input_columnwise(bool training) const {
  return training && !scaling_->recipe().override_linear_precision.wgrad;
}

bool Fp8Linear::takes_fp8_input_only(bool training) const {
  const auto& ovr = scaling_->recipe().override_linear_precision;
  return !ovr.fprop && (!training || !ovr.wgrad);
}

const Fp8Tensor& Fp8Linear::weight_fp8(bool record, bool rowwise, bool columnwise) {
  WeightCache& c = weight_cache_;
  const int64_t version = static_cast<int64_t>(weight._version());
  const bool layouts_ok = (!rowwise || c.fp8.rowwise.defined()) && (!columnwise || c.fp8.columnwise.defined());
  // weight_epoch: a new scale in `step` mode; the next optimizer step in `microbatch` mode,
  // where micro-batches 2..M reuse the first one's FP8 weight as TE does (is_first_microbatch).
  const bool fresh = c.weight_version == version && c.update_count == scaling_->weight_epoch();
  if (fresh && layouts_ok && (c.recorded || !record)) return c.fp8;
  if (!rowwise && !columnwise) {
    c.fp8 = Fp8Tensor{};
    return c.fp8;
  }
  CastOptions opt;
  opt.rowwise = rowwise;
  opt.columnwise = columnwise;
  opt.record = record;
  c.fp8 = scaling_->quantize(slot_weight_, CastSource::tensor(weight.detach()), opt);
  c.weight_version = version;
  c.update_count = scaling_->weight_epoch();
  c.recorded = record && !NoRecordScope::active();
  return c.fp8;
}

at::Tensor Fp8Linear::forward(const at::Tensor& x) {
  FP8T_CHECK(x.size(-1) == in_features, "layer ", name_, ": input has ", x.size(-1), " features, expected ",
             in_features);
  const at::Tensor x2 = x.reshape({-1, in_features});
  const Fp8Tensor* given = nullptr;
  const CastSource* later = nullptr;
  const c10::intrusive_ptr<Fp8LinearGradState>* gradient_producer = nullptr;
  Pending handed;
  if (same_storage(pending_.y, x)) {
    handed = std::move(pending_);
    given = &handed.y_fp8;
    if (handed.columnwise_later) later = &*handed.columnwise_later;
    if (handed.gradient_producer) gradient_producer = &handed.gradient_producer;
  }
  pending_ = Pending{};
  // A view of what its producer keeps (the flag says it keeps it), never a copy made on the way.
  const bool recast_x = recast_input_columnwise_ && given == nullptr && x.is_view();
  at::Tensor y =
      Fp8LinearFunction::apply(x2, weight, optional_tensor(bias), this, given, later, recast_x, gradient_producer);
  auto out_shape = x.sizes().vec();
  out_shape.back() = out_features;
  return y.view(out_shape);
}

}  // namespace fp8
}  // namespace fp8t
