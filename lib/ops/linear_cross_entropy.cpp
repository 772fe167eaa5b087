#include "lib/ops/linear_cross_entropy.h"

#include <c10/core/DispatchKeySet.h>            // c10::autocast_dispatch_keyset
#include <c10/core/impl/LocalDispatchKeySet.h>  // c10::impl::ExcludeDispatchKeyGuard
#include <torch/torch.h>                        // torch::autograd::Function, GradMode

#include <algorithm>  // std::min, std::max

#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::autocast_dtype_or, to_ivalue, from_ivalue

namespace fp8t {
namespace ops {

int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t vocab, int64_t element_bytes, int64_t chunk_bytes) {
  const int64_t row_bytes = std::max<int64_t>(vocab * element_bytes, 1);
  int64_t per = chunk_bytes / row_bytes;
  if (per >= 128) per -= per % 128;
  return std::max<int64_t>(std::min(per, rows), 1);
}

namespace {

// What the chunk loop computes; dx / dw undefined when not wanted.
struct ChunkResults {
  at::Tensor loss;  // 0-d float32 mean
  at::Tensor dx;    // [rows, d], compute dtype: d loss / d x
  at::Tensor dw;    // [vocab, d], float32: d loss / d weight
};

// The CPU chunk: FP32 math (bf16 logits are read as FP32, the gradient rounded back once).
void cross_entropy_chunk_cpu(at::Tensor& logits, const at::Tensor& targets, at::Tensor loss_rows,
                             const at::Tensor& grad_scale) {
  const at::Tensor z = logits.to(at::kFloat);
  loss_rows.copy_(at::cross_entropy_loss(z, targets, /*weight=*/{}, at::Reduction::None));
  if (!grad_scale.defined()) return;
  at::Tensor g = at::softmax(z, 1);
  g.scatter_add_(1, targets.unsqueeze(1), at::full({targets.size(0), 1}, -1.0, g.options()));
  logits.copy_(g.mul_(grad_scale));
}

void cross_entropy_chunk(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& loss_rows,
                         const at::Tensor& lse, const at::Tensor& grad_scale) {
#if defined(FP8T_WITH_CUDA)
  if (logits.is_cuda()) return detail::cross_entropy_chunk_cuda(logits, targets, loss_rows, lse, grad_scale);
#endif
  (void)lse;
  cross_entropy_chunk_cpu(logits, targets, loss_rows, grad_scale);
}

// out = a · bᵀ into the contiguous `out`: on CUDA in BF16 through lib/gemm (plans that
// train.gemm_autotune may tune), else (the CPU, FP32 GEMMs) ATen's.
void head_gemm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const char* label) {
#if defined(FP8T_WITH_CUDA)
  if (out.is_cuda() && out.scalar_type() == at::kBFloat16) return detail::head_gemm_cuda(out, a, b, label);
#endif
  (void)label;
  at::mm_out(out, a, b.t());
}

// dw += gᵀ · x in FP32 (dw = gᵀ · x while dw is undefined: the first chunk).
void accumulate_weight_grad(at::Tensor& dw, const at::Tensor& g, const at::Tensor& x) {
#if defined(FP8T_WITH_CUDA)
  if (g.is_cuda()) return detail::accumulate_weight_grad_cuda(dw, g, x);
#endif
  // CPU: FP32 products (bf16 operands are exact in FP32), so only the sums round.
  const at::Tensor gt = g.t().to(at::kFloat), xf = x.to(at::kFloat);
  dw = dw.defined() ? dw.addmm_(gt, xf) : at::mm(gt, xf);
}

// The chunk loop. x [rows, d] and w [vocab, d] contiguous in the compute dtype, targets [rows]
// int64. grad_scale is 1/rows on the device when a gradient is wanted.
ChunkResults run_chunks(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets, int64_t chunk,
                        bool need_dx, bool need_dw) {
  // The dtypes are chosen here; autocast would turn the FP32 accumulation into BF16 GEMMs.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const int64_t rows = x.size(0), d = x.size(1), vocab = w.size(0);
  const at::TensorOptions f32 = x.options().dtype(at::kFloat);
  ChunkResults out;
  at::Tensor loss_rows = at::empty({rows}, f32);
  at::Tensor grad_scale;
  if (need_dx || need_dw) {
    // A true division on the device, as ATen's mean reduction divides (no host scalar).
    grad_scale = at::ones({1}, f32) / at::full({1}, static_cast<double>(std::max<int64_t>(rows, 1)), f32);
  }
  if (need_dx) out.dx = at::empty({rows, d}, x.options());
  const int64_t cap = std::min(chunk, rows);
  at::Tensor logits_buf = at::empty({cap, vocab}, x.options());
  at::Tensor lse_buf = at::empty({cap}, f32);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t c = std::min(chunk, rows - r0);
    const at::Tensor xc = x.narrow(0, r0, c);
    at::Tensor logits = logits_buf.narrow(0, 0, c);  // leading rows: contiguous
    head_gemm(logits, xc, w, "head logits");
    cross_entropy_chunk(logits, targets.narrow(0, r0, c), loss_rows.narrow(0, r0, c), lse_buf.narrow(0, 0, c),
                        grad_scale);
    if (need_dx) {
      at::Tensor dxc = out.dx.narrow(0, r0, c);
      head_gemm(dxc, logits, w.t(), "head dgrad");
    }
    if (need_dw) accumulate_weight_grad(out.dw, logits, xc);
  }
  if (need_dw && !out.dw.defined()) out.dw = at::zeros({vocab, d}, f32);  // no rows
  out.loss = loss_rows.mean();
  return out;
}

// t *= g in place (g: the 0-d incoming gradient of the loss). On CUDA a kernel that returns at
// once when g is 1, the usual case (the same bits either way: x * 1 == x).
at::Tensor scale_by_incoming(at::Tensor t, const at::Tensor& g) {
#if defined(FP8T_WITH_CUDA)
  if (t.is_cuda() && t.is_contiguous() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16) &&
      g.numel() == 1 && g.scalar_type() == at::kFloat && g.device() == t.device()) {
    detail::scale_unless_one_cuda(t, g.contiguous());
    return t;
  }
#endif
  return t.mul_(g);
}

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  // x: [rows, d] in the compute dtype (autograd converts from the caller's); weight: as the
  // caller holds it (its gradient is float32, cast to its dtype).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, std::shared_ptr<TiedGradient> tied) {
    if (tied) {  // the embedding forward this head follows
      ctx->saved_data["tied_after"] = tied->forwards;
      ctx->saved_data["tied"] = compat::to_ivalue(c10::make_intrusive<detail::TiedHolder>(std::move(tied)));
    }
    // The compute-dtype weight lives for the forward only (the unfused head keeps autocast's copy
    // until the step ends).
    const at::Tensor w = weight.to(x.scalar_type()).contiguous();
    ChunkResults r = run_chunks(x, w, targets, chunk, x.requires_grad(), weight.requires_grad());
    if (r.dw.defined() && weight.scalar_type() != at::kFloat) r.dw = r.dw.to(weight.scalar_type());
    ctx->save_for_backward({r.dx, r.dw});
    return r.loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grads[0];
    // In place: the node releases its saved tensors when this returns, so the gradients take
    // their memory (a second backward through a retained graph fails the saved-version check).
    at::Tensor dx = saved[0].defined() ? scale_by_incoming(saved[0], g) : at::Tensor();
    at::Tensor dw = saved[1].defined() ? scale_by_incoming(saved[1], g) : at::Tensor();
    const auto tied = ctx->saved_data.find("tied");
    if (tied != ctx->saved_data.end() && dw.defined()) {  // the embedding's backward takes it on
      TiedGradient& t = *compat::from_ivalue<detail::TiedHolder>(tied->second)->tied;
      t.dw = std::move(dw);
      t.stored_for = ctx->saved_data["tied_after"].toInt();
      dw = at::Tensor();
    }
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows, int64_t chunk_bytes, const std::shared_ptr<TiedGradient>& tied) {
  FP8T_CHECK(x.defined() && weight.defined() && targets.defined(),
             "linear_cross_entropy: x, weight and targets must be defined tensors");
  FP8T_CHECK(x.dim() >= 1 && at::isFloatingType(x.scalar_type()) && weight.dim() == 2 &&
                 at::isFloatingType(weight.scalar_type()) && x.size(-1) == weight.size(1) && weight.size(0) >= 1 &&
                 weight.size(1) >= 1,
             "linear_cross_entropy: x [..., d] and weight [vocab, d] must be floating-point with one d >= 1 and "
             "vocab >= 1, got x ", x.scalar_type(), " ", x.sizes(), " and weight ", weight.scalar_type(), " ",
             weight.sizes());
  const int64_t d = x.size(-1), vocab = weight.size(0);
  const int64_t rows = x.numel() / d;
  FP8T_CHECK(at::isIntegralType(targets.scalar_type(), /*includeBool=*/false) && targets.numel() == rows,
             "linear_cross_entropy: x ", x.sizes(), " needs ", rows, " integer targets, got ", targets.scalar_type(),
             " ", targets.sizes());
  FP8T_CHECK(x.device() == weight.device() && x.device() == targets.device(), "linear_cross_entropy: x is on ",
             x.device().str(), ", weight on ", weight.device().str(), ", targets on ", targets.device().str());
  const at::ScalarType dtype = compat::autocast_dtype_or(x.device().type(), x.scalar_type());
  FP8T_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "linear_cross_entropy: the head's GEMMs would run in ",
             dtype, "; only float32 and bfloat16 are supported (fp16 needs the unfused head and loss scaling)");
  FP8T_CHECK(chunk_rows > 0 || chunk_bytes > 0, "linear_cross_entropy: chunk_bytes must be positive, got ",
             chunk_bytes);
  const int64_t chunk = chunk_rows > 0
                            ? chunk_rows
                            : linear_cross_entropy_chunk_rows(rows, vocab, at::elementSize(dtype), chunk_bytes);
  // reshape and to are differentiable: x's gradient reaches it in its own dtype and shape.
  const at::Tensor x2 = x.reshape({rows, d}).to(dtype).contiguous();
  const at::Tensor t = targets.reshape({-1}).to(at::kLong).contiguous();
  const bool grad = torch::autograd::GradMode::is_enabled() && (x2.requires_grad() || weight.requires_grad());
  if (!grad) {
    const at::Tensor w = weight.to(dtype).contiguous();
    return run_chunks(x2, w, t, chunk, /*need_dx=*/false, /*need_dw=*/false).loss;
  }
  return LinearCrossEntropyFunction::apply(x2, weight, t, chunk, tied);
}

}  // namespace ops
}  // namespace fp8t
