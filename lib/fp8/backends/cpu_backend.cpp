#include "lib/fp8/backends/cpu_backend.h"

#include <ATen/Parallel.h>  // at::parallel_for

#include <algorithm>  // std::max
#include <array>      // std::array
#include <cmath>      // std::fabs
#include <cstdint>    // uintptr_t

#include "lib/fp8/backends/rowwise_quantize.h"  // is_row_scaled, rowwise_gemm
#include "lib/fp8/backends/block_backend.h"  // is_block_scaled, block_gemm
#include "lib/numerics/format.h"             // encode, decode
#include "lib/numerics/saturation_math.h"    // saturates, flushes_to_zero
#include "lib/numerics/scaling_math.h"       // update_slot, amax_combine, current_scale
#include "lib/ops/rms_norm.h"                // ops::rms_norm (the plain model's formula)
#include "lib/util/error.h"                  // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per parallel task

std::array<float, 256> make_lut(Format f) {
  std::array<float, 256> lut{};
  for (int c = 0; c < 256; ++c) lut[c] = decode(static_cast<uint8_t>(c), f);
  return lut;
}

const std::array<float, 256>& lut_for(Format f) {
  static const std::array<float, 256> e4m3 = make_lut(Format::kE4M3);
  static const std::array<float, 256> e5m2 = make_lut(Format::kE5M2);
  return f == Format::kE4M3 ? e4m3 : e5m2;
}

// max-accumulate max|x| into the slot: NaN elements are ignored, inf counts (amax_combine,
// TE's fmaxf-based cast amax; the CUDA casts do the same through abs_bits).
void accumulate_amax(const at::Tensor& xf, const SlotRef& slot) {
  const float* p = xf.data_ptr<float>();
  const int64_t n = xf.numel();
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = amax_combine(amax, std::fabs(p[i]));
  float* dst = slot.amax.data_ptr<float>();
  *dst = amax_combine(*dst, amax);
}

Fp8Operand encode_tensor(const at::Tensor& xf, float scale, float scale_inv, Format f) {
  Fp8Operand op;
  op.codes = at::empty(xf.sizes(), at::TensorOptions().dtype(at::kByte));
  op.scale_inv = at::full({}, scale_inv, at::kFloat);
  op.format = f;
  const float* src = xf.data_ptr<float>();
  uint8_t* dst = op.codes.data_ptr<uint8_t>();
  at::parallel_for(0, xf.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = encode(src[i] * scale, f);
  });
  return op;
}

// The emulated per-tensor cast of a plain 2-D tensor (any float dtype) in the asked layouts.
Fp8Tensor quantize_tensor(const at::Tensor& x, const SlotRef& slot, bool rowwise, bool columnwise) {
  FP8T_CHECK(x.dim() == 2, "quantize expects a 2-D tensor, got ", x.sizes());
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  accumulate_amax(xf, slot);
  const float scale = slot.scale.item<float>();
  const float scale_inv = 1.0f / scale;  // the snapshot stored with the data, as on the GPU
  Fp8Tensor out;
  if (rowwise) out.rowwise = encode_tensor(xf, scale, scale_inv, slot.format);
  if (columnwise) out.columnwise = encode_tensor(xf.t().contiguous(), scale, scale_inv, slot.format);
  return out;
}

// cuBLASLt's pointer rules, which the emulation keeps so that a layout the GPU refuses fails
// here too: FP8 codes and per-tensor scales 16-byte aligned (lib/gemm/gemm_engine.cpp).
void check_aligned_like_cublaslt(const Fp8Operand& a, const Fp8Operand& b, GemmKind kind) {
  const auto aligned = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  FP8T_CHECK(aligned(a.codes) && aligned(b.codes), "fp8 gemm ", to_string(kind),
             ": FP8 codes must be 16-byte aligned (cuBLASLt); a view at an offset?");
  FP8T_CHECK(aligned(a.scale_inv) && aligned(b.scale_inv), "fp8 gemm ", to_string(kind),
             ": scale_inv must be 16-byte aligned (cuBLASLt); a view at an offset?");
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu-emulation"; }

  // A plain tensor is cast here (with dbias: both layouts and the column sums, as quantize_grad);
  // a fused source is emulated: its value computed with LibTorch, then cast here.
  Fp8Tensor quantize(const CastSource& src, const SlotRef& slot, const QuantizeOptions& opt) override {
    if (src.op != CastOp::kIdentity || opt.value.columnwise != nullptr) return quantize_unfused(src, slot, opt);
    if (opt.dbias == nullptr) return quantize_tensor(src.x, slot, opt.rowwise, opt.columnwise);
    *opt.dbias = src.x.to(at::kFloat).sum(0);
    return quantize_tensor(src.x, slot, true, true);
  }

  at::Tensor gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                  at::ScalarType out_dtype, GemmKind kind, bool fast_accum) override {
    if (is_row_scaled(a) || is_row_scaled(b)) return rowwise_gemm(a, b, bias, out_dtype, kind, fast_accum);
    if (is_block_scaled(a) || is_block_scaled(b)) return block_gemm(a, b, bias, out_dtype, kind);
    FP8T_CHECK(a.codes.size(1) == b.codes.size(1), "fp8 gemm ", to_string(kind), ": K mismatch ",
               a.codes.sizes(), " vs ", b.codes.sizes());
    FP8T_CHECK(!(a.format == Format::kE5M2 && b.format == Format::kE5M2),
               "fp8 gemm ", to_string(kind), ": E5M2 x E5M2 is not supported (cuBLASLt)");
    check_aligned_like_cublaslt(a, b, kind);
    // FP8 x FP8 products are exact in FP32; the sum is FP32 like the tensor cores' accumulator
    // (which keeps fewer bits with fast accumulation: that difference is not emulated).
    at::Tensor out = at::mm(decode_codes(a.codes, a.format), decode_codes(b.codes, b.format).t());
    out.mul_(a.scale_inv * b.scale_inv);
    if (bias.defined()) out.add_(bias.to(at::kFloat));
    return out.to(out_dtype);
  }

  NormForwardResult norm_forward(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta,
                                 double eps, bool rms, const SlotRef* slot, bool write_y,
                                 const at::Tensor& y_amax) override {
    NormForwardResult r;
    const at::Tensor xf = x.to(at::kFloat);
    if (rms) {
      ops::RmsNormOutput o = ops::rms_norm(x, gamma, eps);
      r.y = std::move(o.y);
      r.rstd = o.rstd.view({-1});
    } else {
      auto res = at::native_layer_norm(xf, {x.size(1)}, gamma.to(at::kFloat),
                                       beta.defined() ? beta.to(at::kFloat) : at::Tensor(), eps);
      r.y = std::get<0>(res).to(x.scalar_type());
      r.mean = std::get<1>(res).view({-1});
      r.rstd = std::get<2>(res).view({-1});
    }
    if (slot != nullptr) r.y_fp8 = quantize_tensor(r.y, *slot, true, true);
    if (slot == nullptr && y_amax.defined()) record_amax(CastSource::tensor(r.y), y_amax);
    if (!write_y && (slot != nullptr || y_amax.defined())) r.y = at::Tensor();
    return r;
  }

  NormBackwardResult norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& gamma,
                                   const at::Tensor& beta, const at::Tensor& mean, const at::Tensor& rstd,
                                   bool rms) override {
    NormBackwardResult r;
    const at::Tensor dyf = dy.to(at::kFloat), xf = x.to(at::kFloat), g = gamma.to(at::kFloat);
    if (rms) {
      // y = x * rstd * g;  dx = rstd * (dy*g - x * rstd^2 * mean(dy*g*x));  dg = sum(dy * x * rstd)
      const at::Tensor r1 = rstd.unsqueeze(1);
      const at::Tensor dyg = dyf * g;
      const at::Tensor dot = (dyg * xf).mean(-1, /*keepdim=*/true);
      r.grad_x = (r1 * (dyg - xf * r1.pow(2) * dot)).to(x.scalar_type());
      r.grad_gamma = (dyf * xf * r1).sum(0);
    } else {
      auto res = at::native_layer_norm_backward(dyf, xf, {x.size(1)}, mean.view({-1, 1}), rstd.view({-1, 1}), g,
                                                beta.defined() ? beta.to(at::kFloat) : at::Tensor(),
                                                {true, true, beta.defined()});
      r.grad_x = std::get<0>(res).to(x.scalar_type());
      r.grad_gamma = std::get<1>(res);
      if (beta.defined()) r.grad_beta = std::get<2>(res);
    }
    return r;
  }

  void update_scaling(at::Tensor& history, at::Tensor& scale, at::Tensor& scale_inv, const at::Tensor& fp8_max,
                      float two_pow_margin, bool use_max, bool recompute) override {
    const int S = static_cast<int>(history.size(1)), L = static_cast<int>(history.size(0));
    float* h = history.data_ptr<float>();
    float* s = scale.data_ptr<float>();
    float* si = scale_inv.data_ptr<float>();
    const float* m = fp8_max.data_ptr<float>();
    for (int i = 0; i < S; ++i) update_slot(h + i, L, S, s + i, si + i, m[i], two_pow_margin, use_max, recompute);
  }

  void current_scale(const at::Tensor& amax, const at::Tensor& scale, const at::Tensor& scale_inv, float fp8_max,
                     float two_pow_margin) override {
    const float s = fp8::current_scale(amax.item<float>(), fp8_max, two_pow_margin);
    scale.fill_(s);
    scale_inv.fill_(1.0f / s);
  }

  at::Tensor saturation_stats(const at::Tensor& x, const SlotRef& slot) override {
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    const float scale = slot.scale.item<float>();
    const float fmax = format_max(slot.format);
    const float* p = xf.data_ptr<float>();
    int64_t sat = 0, under = 0;
    for (int64_t i = 0; i < xf.numel(); ++i) {
      const float v = p[i] * scale;
      if (saturates(v, fmax)) ++sat;
      if (flushes_to_zero(p[i], encode(v, slot.format))) ++under;
    }
    const float n = static_cast<float>(std::max<int64_t>(1, xf.numel()));
    return at::tensor({sat / n, under / n}, at::kFloat);
  }
};

}  // namespace

at::Tensor decode_codes(const at::Tensor& codes, Format format) {
  const at::Tensor c = codes.cpu().contiguous();
  at::Tensor out = at::empty(c.sizes(), at::kFloat);
  const auto& lut = lut_for(format);
  const uint8_t* src = c.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, c.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = lut[src[i]];
  });
  return out;
}

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace fp8
}  // namespace fp8t
