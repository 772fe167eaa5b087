#include "lib/fp8/backends/backend.h"

#include <cmath>    // std::fabs
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/numerics/block_math.h"          // kBlockLen
#include "lib/fp8/backends/block_quantize.h"  // make_block_scales
#include "lib/fp8/backends/cpu_backend.h"     // cpu_backend
#include "lib/numerics/scaling_math.h"        // amax_combine
#include "lib/fp8/backends/swiglu_ops.h"      // swiglu_value, swiglu_gradient
#include "lib/util/error.h"                   // FP8T_THROW
#if defined(FP8T_WITH_CUDA)
#include "lib/fp8/backends/cuda_backend.h"   // cuda_backend
#endif

namespace fp8t {
namespace fp8 {

const char* to_string(GemmKind k) {
  switch (k) {
    case GemmKind::kFprop: return "fprop";
    case GemmKind::kDgrad: return "dgrad";
    case GemmKind::kWgrad: return "wgrad";
  }
  return "?";
}

Fp8Tensor Backend::quantize_grad(const at::Tensor& dy, const SlotRef& slot, bool want_dbias, at::Tensor* dbias) {
  FP8T_CHECK(!want_dbias || dbias != nullptr, "quantize_grad: want_dbias needs an output tensor");
  return quantize(CastSource::tensor(dy), slot, QuantizeOptions{true, true, want_dbias ? dbias : nullptr, {}});
}

at::Tensor materialize(const CastSource& src) {
  switch (src.op) {
    case CastOp::kIdentity: return src.x;
    case CastOp::kGelu: return at::gelu(src.x, "tanh");
    case CastOp::kDgelu: return at::gelu_backward(src.x.to(src.h.scalar_type()), src.h, "tanh");
    case CastOp::kSwiglu: return swiglu_value(src.x);
    case CastOp::kDswiglu: return swiglu_gradient(src.x, src.h);
  }
  FP8T_THROW(ExitCode::kFailure, "materialize: unknown cast operation ", static_cast<int>(src.op));
}

// The gradient and the value from one quantize() of src each: the fallback of a value companion.
static Fp8Tensor quantize_with_value_unfused(Backend& backend, const CastSource& src, const SlotRef& slot,
                                             const QuantizeOptions& opt) {
  FP8T_CHECK(src.op == CastOp::kDswiglu, "fp8 cast: only a SwiGLU gradient cast writes the value's codes too");
  Fp8Tensor out = backend.quantize(src, slot, QuantizeOptions{true, true, opt.dbias, {}});
  SlotRef v = opt.value.slot;
  v.amax = at::zeros({}, src.h.options().dtype(at::kFloat));  // recorded nowhere
  *opt.value.columnwise = backend.quantize(CastSource::swiglu(src.h), v, QuantizeOptions{false, true, nullptr, {}})
                              .columnwise;
  return out;
}

Fp8Tensor Backend::quantize_unfused(const CastSource& src, const SlotRef& slot, const QuantizeOptions& opt) {
  if (opt.value.columnwise != nullptr) return quantize_with_value_unfused(*this, src, slot, opt);
  const bool gradient = src.op == CastOp::kDgelu || src.op == CastOp::kDswiglu ||
                        (src.op == CastOp::kIdentity && opt.dbias != nullptr);
  const QuantizeOptions plain = gradient ? QuantizeOptions{true, true, opt.dbias, {}}
                                         : QuantizeOptions{opt.rowwise, opt.columnwise, nullptr, {}};
  return quantize(CastSource::tensor(materialize(src)), slot, plain);
}

at::Tensor Backend::transpose_codes(const at::Tensor& codes) { return codes.t().contiguous(); }

namespace {

// The groups' [start, end) from offsets (read on the host: the emulation's loop).
std::vector<std::pair<int64_t, int64_t>> group_bounds(const at::Tensor& offsets, int64_t extent) {
  const at::Tensor ends = offsets.to(at::kCPU, at::kLong);
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t start = 0;
  for (int64_t g = 0; g < ends.numel(); ++g) {
    const int64_t end = ends[g].item<int64_t>();
    FP8T_CHECK(end >= start && end <= extent, "fp8 grouped gemm: group ", g, " ends at ", end, " (previous end ", start,
               ", extent ", extent, ")");
    out.emplace_back(start, end);
    start = end;
  }
  FP8T_CHECK(start == extent, "fp8 grouped gemm: the groups end at ", start, " of ", extent);
  return out;
}

// Rows [begin, begin + n) of an operand (its codes and, for row scales, its scales).
Fp8Operand operand_rows(const Fp8Operand& op, int64_t begin, int64_t n) {
  Fp8Operand out = op;
  out.codes = op.codes.narrow(0, begin, n);
  if (op.scale_layout == ScaleLayout::kRowwise) out.scale_inv = op.scale_inv.narrow(0, begin, n);
  return out;
}

// Columns [begin, begin + n) of an operand's codes (contiguous copies; the scales stay: per tensor,
// or per row over all the columns).
Fp8Operand operand_columns(const Fp8Operand& op, int64_t begin, int64_t n) {
  Fp8Operand out = op;
  out.codes = op.codes.narrow(1, begin, n).contiguous();
  return out;
}

void check_grouped_operands(const Fp8Operand& a, const Fp8Operand& b) {
  for (const Fp8Operand* op : {&a, &b}) {
    FP8T_CHECK(op->format == Format::kE4M3, "fp8 grouped gemm: operands must be E4M3 (the grouped kernel's format)");
    FP8T_CHECK(op->scale_layout == ScaleLayout::kTensor || op->scale_layout == ScaleLayout::kRowwise,
               "fp8 grouped gemm: per-tensor or per-row scales only (block scales have no grouped GEMM)");
  }
}

}  // namespace

at::Tensor Backend::grouped_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                 at::ScalarType out_dtype, GemmKind kind, bool fast_accum, GroupedOperands stacked) {
  check_grouped_operands(a, b);
  const bool rows = stacked == GroupedOperands::kStackedRows;
  const int64_t groups = offsets.numel(), kc = a.codes.size(1), extent = b.codes.size(rows ? 0 : 1);
  const int64_t per_group = rows ? extent / groups : kc;
  FP8T_CHECK(per_group * groups == extent, "fp8 grouped gemm: b ", b.codes.sizes(), " for ", groups, " groups of a ",
             a.codes.sizes());
  std::vector<at::Tensor> parts;
  const auto bounds = group_bounds(offsets, a.codes.size(0));
  for (size_t g = 0; g < bounds.size(); ++g) {
    const auto [start, end] = bounds[g];
    const int64_t first = static_cast<int64_t>(g) * per_group;
    parts.push_back(gemm(operand_rows(a, start, end - start),
                         rows ? operand_rows(b, first, per_group) : operand_columns(b, first, per_group), at::Tensor(),
                         out_dtype, kind, fast_accum));
  }
  return at::cat(parts, 0);
}

at::Tensor Backend::grouped_gemm_wgrad(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                       bool fast_accum) {
  check_grouped_operands(a, b);
  std::vector<at::Tensor> parts;
  for (const auto& [start, end] : group_bounds(offsets, a.codes.size(1))) {
    parts.push_back(gemm(operand_columns(a, start, end - start), operand_columns(b, start, end - start), at::Tensor(),
                         at::kBFloat16, GemmKind::kWgrad, fast_accum));
  }
  return at::stack(parts, 0);
}

Fp8Operand transposed(const Fp8Operand& op) {
  FP8T_CHECK(op.defined() && op.codes.dim() == 2, "fp8 transpose: expected 2-D FP8 codes");
  FP8T_CHECK(op.scale_layout != ScaleLayout::kBlock1x128,
             "fp8 transpose: a 1x128 block-scaled operand cannot be transposed (its blocks run along K)");
  FP8T_CHECK(op.scale_layout != ScaleLayout::kRowwise,
             "fp8 transpose: a row-scaled operand cannot be transposed (its scales run along K): cast the "
             "columnwise copy");
  Fp8Operand t;
  t.codes = backend_for(op.codes.device()).transpose_codes(op.codes);
  t.format = op.format;
  t.scale_layout = op.scale_layout;
  if (op.scale_layout == ScaleLayout::kTensor) {
    t.scale_inv = op.scale_inv;
  } else {  // the grid of the transposed operand [cols, rows], holding the same blocks transposed
    t.scale_inv = make_block_scales(op.codes.size(1), op.codes.size(0), kBlockLen, op.codes.device());
    t.scale_inv.copy_(op.scale_inv.t());
  }
  return t;
}

void Backend::record_amax(const CastSource& src, const at::Tensor& amax) {
  const at::Tensor v = materialize(src).to(at::kFloat).contiguous().cpu();
  const float* p = v.data_ptr<float>();
  float m = 0.0f;
  for (int64_t i = 0; i < v.numel(); ++i) m = amax_combine(m, std::fabs(p[i]));
  const float prev = amax.item<float>();
  amax.fill_(amax_combine(prev, m));
}

at::Tensor Backend::current_amax_scale(const CastSource& src, const at::Tensor& known_amax, const at::Tensor& amax,
                                       const at::Tensor& scale, const at::Tensor& scale_inv,
                                       const at::Tensor& /*workspace*/, float fp8_max, float two_pow_margin,
                                       bool /*may_write_value*/) {
  if (known_amax.defined()) {
    amax.copy_(known_amax);
  } else {
    amax.zero_();
    record_amax(src, amax);
  }
  current_scale(amax, scale, scale_inv, fp8_max, two_pow_margin);
  return at::Tensor();
}

#if defined(FP8T_WITH_CUDA)
constexpr const char* kSupported = "cpu, cuda";
#else
constexpr const char* kSupported = "cpu";
#endif

Backend& backend_for(const at::Device& device) {
  if (device.is_cpu()) return cpu_backend();
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) return cuda_backend();
#endif
  FP8T_THROW(ExitCode::kBadInput, "precision fp8 has no backend for device ", device.str(),
             " in this build (supported: ", kSupported, ")");
}

NormForwardResult Backend::add_norm_forward(const at::Tensor& x, const at::Tensor& h, const at::Tensor& gamma,
                                            const at::Tensor& beta, double eps, bool rms, const SlotRef* slot,
                                            bool write_y, const at::Tensor& y_amax) {
  FP8T_CHECK(x.scalar_type() == at::kFloat && h.sizes() == x.sizes(), "add_norm_forward: x must be float32 and h of ",
             "its shape, got ", x.scalar_type(), " ", x.sizes(), " and ", h.scalar_type(), " ", h.sizes());
  const at::Tensor r = x + h;  // FP32: ATen promotes h
  NormForwardResult out = norm_forward(r, gamma, beta, eps, rms, slot, write_y, y_amax);
  out.sum = r;
  return out;
}

NormBackwardResult Backend::add_norm_backward(const at::Tensor& dy, const at::Tensor& dr, const at::Tensor& r,
                                              const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mean,
                                              const at::Tensor& rstd, bool rms, at::ScalarType h_dtype) {
  NormBackwardResult out = norm_backward(dy, r, gamma, beta, mean, rstd, rms);
  if (dr.defined()) out.grad_x = out.grad_x + dr;  // the sum autograd forms unfused (the order is immaterial)
  out.grad_h = out.grad_x.to(h_dtype);
  return out;
}

}  // namespace fp8
}  // namespace fp8t
