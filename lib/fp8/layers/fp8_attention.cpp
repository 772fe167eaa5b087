#include "lib/fp8/layers/fp8_attention.h"

#include <spdlog/spdlog.h>  // spdlog::warn

#include <atomic>  // std::atomic
#include <cmath>   // std::sqrt
#include <sstream>  // std::ostringstream

#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::to_ivalue, from_ivalue

namespace fp8t {
namespace fp8 {
namespace {

double attn_scale_of(const at::Tensor& q) { return 1.0 / std::sqrt(static_cast<double>(q.size(-1))); }

// x [B, heads, T, D] cast per tensor for `slot`: codes in x's logical order.
AttentionOperand cast(Scaling& scaling, int slot, const at::Tensor& x, bool record) {
  CastOptions opt;
  opt.record = record;
  const Fp8Tensor t =
      scaling.quantize_per_tensor(slot, CastSource::tensor(x.reshape({-1, x.size(-1)}).contiguous()), opt);
  return AttentionOperand{t.rowwise.codes.view(x.sizes()), t.rowwise.scale_inv, t.rowwise.format};
}

AttentionForward run_forward(const AttentionOperand& q, const AttentionOperand& k, const AttentionOperand& v,
                             double attn_scale, at::ScalarType dtype, const SlotRef* o_slot) {
  if (!q.codes.is_cuda()) return emulate_attention_forward(q, k, v, attn_scale, dtype, o_slot);
  std::string refused;
  std::optional<AttentionForward> r = cudnn_attention_forward(q, k, v, attn_scale, dtype, o_slot, &refused);
  FP8T_CHECK(r.has_value(), "fp8 attention: cuDNN refused a forward it had accepted: ", refused);
  return *r;
}

AttentionGrads run_backward(const AttentionBackwardInputs& in, const AttentionGradScales& scales, double attn_scale,
                            at::ScalarType dtype) {
  if (!in.q.codes.is_cuda()) return emulate_attention_backward(in, scales, attn_scale, dtype);
  std::string refused;
  std::optional<AttentionGrads> r = cudnn_attention_backward(in, scales, attn_scale, dtype, &refused);
  FP8T_CHECK(r.has_value(), "fp8 attention: cuDNN refused a backward it had accepted: ", refused);
  return *r;
}

// The SlotRef of a tensor the backward kernel quantizes (index i of measured_amax): delayed
// gives its slot; the others a scale from the amax the last backward measured, with a new amax
// sink (`scale_one`: scale 1, the measuring run).
SlotRef produced_slot(Fp8AttentionState& st, int slot, int i, const at::Device& device, bool scale_one,
                      bool record = true) {
  if (std::optional<SlotRef> delayed = st.scaling->fused_cast_slot(slot, record)) return *delayed;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  SlotRef ref{at::ones({}, f32), at::zeros({}, f32), st.scaling->slot_format(slot), slot};
  if (!scale_one) {
    backend_for(device).current_scale(st.measured_amax[i], ref.scale, at::ones({}, f32),
                                      format_max(ref.format), /*two_pow_margin=*/1.0f);
  }
  return ref;
}

AttentionGradScales grad_scales(Fp8AttentionState& st, bool fp8_outputs, const at::Device& device, bool scale_one) {
  AttentionGradScales s;
  s.ds = produced_slot(st, st.slot_ds, 0, device, scale_one);
  s.fp8_outputs = fp8_outputs;
  if (fp8_outputs) {
    s.dq = produced_slot(st, st.slot_dq, 1, device, scale_one);
    s.dk = produced_slot(st, st.slot_dk, 2, device, scale_one);
    s.dv = produced_slot(st, st.slot_dv, 3, device, scale_one);
  }
  return s;
}

// `amax` into the state's tensor in place (a copy on the first): a replayed CUDA graph reads the
// tensors it captured, so the next step's scale must come from the same tensor every step.
void keep_amax(at::Tensor& kept, const at::Tensor& amax) {
  if (kept.defined()) {
    kept.copy_(amax);
  } else {
    kept = amax.clone();
  }
}

// Outside delayed scaling: keep this backward's amaxes for the next one's scales.
void keep_measured(Fp8AttentionState& st, const AttentionGradScales& s) {
  if (st.scaling->fused_cast_slot(st.slot_ds, true)) return;
  keep_amax(st.measured_amax[0], s.ds.amax);
  if (!s.fp8_outputs) return;
  keep_amax(st.measured_amax[1], s.dq.amax);
  keep_amax(st.measured_amax[2], s.dk.amax);
  keep_amax(st.measured_amax[3], s.dv.amax);
}

bool needs_measuring(const Fp8AttentionState& st, bool fp8_outputs) {
  if (st.scaling->fused_cast_slot(st.slot_ds, true)) return false;
  if (!st.measured_amax[0].defined()) return true;
  return fp8_outputs && !st.measured_amax[1].defined();
}

// The forward's FP8 operands of O: the kernel's own FP8 O (before Blackwell; its scale known
// beforehand, like dS's) or a cast of the 16-bit O after the kernel.
AttentionForward forward_with_o(Fp8AttentionState& st, const AttentionOperand& q8, const AttentionOperand& k8,
                                const AttentionOperand& v8, double attn_scale, at::ScalarType dtype, bool record) {
  const at::Device device = q8.codes.device();
  const bool delayed = st.scaling->fused_cast_slot(st.slot_o, false).has_value();
  if (!(device.is_cuda() && cudnn_attention_needs_fp8_outputs(device))) {
    AttentionForward f = run_forward(q8, k8, v8, attn_scale, dtype, nullptr);
    f.o8 = cast(*st.scaling, st.slot_o, f.out, record);
    return f;
  }
  if (!delayed && !st.measured_amax[4].defined()) {
    const SlotRef once = produced_slot(st, st.slot_o, 4, device, /*scale_one=*/true, record);
    run_forward(q8, k8, v8, attn_scale, dtype, &once);  // only its amax is kept
    keep_amax(st.measured_amax[4], once.amax);
  }
  const SlotRef o = produced_slot(st, st.slot_o, 4, device, /*scale_one=*/false, record);
  AttentionForward f = run_forward(q8, k8, v8, attn_scale, dtype, &o);
  if (!delayed && record) keep_amax(st.measured_amax[4], o.amax);
  return f;
}

class Fp8AttentionFunction : public torch::autograd::Function<Fp8AttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const c10::intrusive_ptr<Fp8AttentionState>& state, bool record) {
    Scaling& s = *state->scaling;
    const AttentionOperand q8 = cast(s, state->slot_q, q, record), k8 = cast(s, state->slot_k, k, record),
                           v8 = cast(s, state->slot_v, v, record);
    const AttentionForward f = forward_with_o(*state, q8, k8, v8, attn_scale_of(q), q.scalar_type(), record);
    const AttentionOperand& o8 = f.o8;
    ctx->save_for_backward({q8.codes, q8.scale_inv, k8.codes, k8.scale_inv, v8.codes, v8.scale_inv, o8.codes,
                            o8.scale_inv, f.stats});
    ctx->saved_data["state"] = compat::to_ivalue(state);
    ctx->saved_data["dtype"] = static_cast<int64_t>(q.scalar_type());
    return f.out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto state = compat::from_ivalue<Fp8AttentionState>(ctx->saved_data["state"]);
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const Format e4m3 = Format::kE4M3;
    AttentionBackwardInputs in{{saved[0], saved[1], e4m3}, {saved[2], saved[3], e4m3}, {saved[4], saved[5], e4m3},
                               {saved[6], saved[7], e4m3}, {}, saved[8]};
    in.dout = cast(*state->scaling, state->slot_grad, grads[0], /*record=*/true);
    const at::Device device = saved[0].device();
    const bool fp8_outputs = device.is_cuda() && cudnn_attention_needs_fp8_outputs(device);
    const double attn_scale = 1.0 / std::sqrt(static_cast<double>(saved[0].size(-1)));
    if (needs_measuring(*state, fp8_outputs)) {
      const AttentionGradScales once = grad_scales(*state, fp8_outputs, device, /*scale_one=*/true);
      run_backward(in, once, attn_scale, dtype);  // only its amaxes are kept
      keep_measured(*state, once);
    }
    const AttentionGradScales scales = grad_scales(*state, fp8_outputs, device, /*scale_one=*/false);
    AttentionGrads g = run_backward(in, scales, attn_scale, dtype);
    keep_measured(*state, scales);
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor()};
  }
};

std::atomic<bool> warned_fallback{false};

}  // namespace

Fp8Attention::Fp8Attention(const std::string& name, std::shared_ptr<Scaling> scaling)
    : state_(c10::make_intrusive<Fp8AttentionState>()) {
  Scaling& s = *scaling;
  const std::string p = name + ".sdpa:";
  state_->slot_q = s.add_slot(p + "q", TensorRole::kInput);
  state_->slot_k = s.add_slot(p + "k", TensorRole::kInput);
  state_->slot_v = s.add_slot(p + "v", TensorRole::kInput);
  state_->slot_o = s.add_slot(p + "o", TensorRole::kInput);
  state_->slot_grad = s.add_slot(p + "grad_output", TensorRole::kGradOutput);
  state_->slot_ds = s.add_slot(p + "ds", TensorRole::kGradOutput);
  state_->slot_dq = s.add_slot(p + "dq", TensorRole::kGradOutput);
  state_->slot_dk = s.add_slot(p + "dk", TensorRole::kGradOutput);
  state_->slot_dv = s.add_slot(p + "dv", TensorRole::kGradOutput);
  state_->scaling = std::move(scaling);
}

std::string Fp8Attention::refusal(const at::Tensor& q, const at::Tensor& k) const {
  FP8T_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(1) % k.size(1) == 0, "fp8 attention: expected q [B, H, T, D] and "
             "k [B, KV, T, D] with KV dividing H, got ", q.sizes(), " and ", k.sizes());
  if (!q.is_cuda()) return "";
  const std::string missing = cudnn_attention_unavailable();
  if (!missing.empty()) return missing;
  const AttentionShape shape{q.size(0), q.size(1), k.size(1), q.size(2), q.size(3)};
  const Format grad = state_->scaling->slot_format(state_->slot_grad);
  return cudnn_attention_refusal(shape, attn_scale_of(q), q.scalar_type(), grad,
                                 cudnn_attention_needs_fp8_outputs(q.device()));
}

at::Tensor Fp8Attention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!fell_back_ && q.sizes().vec() != checked_shape_) {
    const std::string why = refusal(q, k);
    if (why.empty()) {
      checked_shape_ = q.sizes().vec();
    } else {
      fell_back_ = true;
      fallback_reason_ = why;
      if (!warned_fallback.exchange(true)) {
        std::ostringstream shape;
        shape << q.sizes();
        spdlog::warn("fp8.attention: cuDNN has no FP8 attention for q {} (head dim {}): {}; attention runs in {} "
                     "instead (this warning is shown once)",
                     shape.str(), q.size(3), why, c10::toString(q.scalar_type()));
      }
    }
  }
  if (fell_back_) return high_precision_attention(q, k, v);
  return Fp8AttentionFunction::apply(q, k, v, state_, at::GradMode::is_enabled());
}

std::string attention_summary(const std::vector<std::shared_ptr<Fp8Attention>>& layers) {
  if (layers.empty()) return "";
  size_t fell_back = 0;
  std::string reason;
  for (const auto& l : layers) {
    if (!l->fell_back()) continue;
    if (fell_back++ == 0) reason = l->fallback_reason();
  }
  std::ostringstream s;
  s << layers.size() - fell_back << " of " << layers.size() << " attention layers in FP8";
  if (fell_back > 0) s << "; " << fell_back << " in the compute dtype (cuDNN: " << reason << ")";
  return s.str();
}

at::Tensor high_precision_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/k.size(1) != q.size(1));
}

}  // namespace fp8
}  // namespace fp8t
