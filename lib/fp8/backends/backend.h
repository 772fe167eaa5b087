// FP8 compute backend: HOW tensors are cast to FP8 and multiplied.
//
// The recipes' state classes (scaling.h: delayed, current, block, rowwise), the FP8 modules and the
// rewrite pass are shared; a backend only casts, multiplies and normalises, and a recipe composes
// these primitives (lib/fp8/recipes/scaling.h says which recipe uses which). CpuBackend emulates FP8
// exactly (quantize -> dequantize, FP32 GEMMs); CudaBackend (cuda_backend_cuda.cpp) uses
// kernels/ and cuBLASLt (lib/gemm/). backend_for(device) picks one.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <optional>  // std::optional
#include <utility>   // std::move

#include "lib/numerics/format.h"  // Format

namespace fp8t {
namespace fp8 {

// An optional tensor argument of a custom autograd function: LibTorch's Function::apply takes
// undefined tensors only as std::nullopt.
inline std::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}


// One per-tensor scaling slot as a cast sees it: views into a recipe's state tensors (delayed:
// the scale and amax_history[0][slot]; current: the scale computed for this cast).
struct SlotRef {
  at::Tensor scale;      // 0-d float32: q = fp8(x * scale)
  at::Tensor amax;       // 0-d float32; the cast max-accumulates |x| here
  Format format = Format::kE4M3;
  int index = -1;        // slot index in the recipe state (for stats and error messages)
};

// How an operand's scale_inv is laid out (the cuBLASLt scale modes of the GEMM that reads it).
//   kTensor:       0-d float32, one factor for the whole tensor (delayed, current; SCALAR_32F).
//   kBlock1x128:   the view [rows, ceil(K/128)] float32 with strides (1, round_up4(rows)): one
//                  factor per 128 consecutive values along K, the rows dim contiguous and padded
//                  to a multiple of 4 (VEC128_32F).
//   kBlock128x128: the view [ceil(rows/128), ceil(K/128)] float32 with strides
//                  (round_up4(ceil(K/128)), 1): row-major, the row stride padded to a multiple of
//                  4 (16-byte aligned rows): one factor per 128x128 block (BLK128x128_32F).
//   kRowwise:      [rows] float32, contiguous: one factor per row of the operand (its amax over K),
//                  for both operands of a GEMM (OUTER_VEC_32F; the row-wise recipe,
//                  lib/fp8/backends/rowwise_quantize.h).
//   1x128 x 128x128 pairs are allowed, 128x128 x 128x128 is not (lib/numerics/block_math.h).
enum class ScaleLayout { kTensor, kBlock1x128, kBlock128x128, kRowwise };

// One FP8 operand of a GEMM: uint8 codes of a row-major 2-D tensor whose last dim is the GEMM's K
// (K contiguous, the "T"/"N" layout Hopper needs), plus the factors that dequantize it.
struct Fp8Operand {
  at::Tensor codes;      // uint8 [rows, K], contiguous
  at::Tensor scale_inv;  // float32 in `scale_layout`: the factors the codes were cast with (a snapshot)
  Format format = Format::kE4M3;
  ScaleLayout scale_layout = ScaleLayout::kTensor;
  bool defined() const { return codes.defined(); }
};

// What a cast reads. A fused producer describes its output this way and the recipe's state
// class casts it; the backend evaluates the operation inside its cast kernels, so the value is
// never written in high precision. Gradient sources (kDgelu, kDswiglu) always produce both
// layouts.
enum class CastOp {
  kIdentity,  // x itself
  kGelu,      // gelu(x) (tanh approximation, in x's dtype), x = the GELU input h
  kDgelu,     // at::gelu_backward(x, h, "tanh") in h's dtype: x = dy, h = the GELU input
  kSwiglu,    // silu(gate) * up [rows, F] in x's dtype, x = h [rows, 2F] = [gate | up] (swiglu_ops.h)
  kDswiglu,   // the gradient of h [rows, 2F] = [dgate | dup] in h's dtype: x = dy [rows, F]
};
struct CastSource {
  CastOp op = CastOp::kIdentity;
  at::Tensor x;  // 2-D
  at::Tensor h;  // the activation input of a backward op (kDgelu, kDswiglu), else undefined

  static CastSource tensor(at::Tensor x) { return {CastOp::kIdentity, std::move(x), at::Tensor()}; }
  static CastSource gelu(at::Tensor h) { return {CastOp::kGelu, std::move(h), at::Tensor()}; }
  static CastSource dgelu(at::Tensor dy, at::Tensor h) { return {CastOp::kDgelu, std::move(dy), std::move(h)}; }
  static CastSource swiglu(at::Tensor h) { return {CastOp::kSwiglu, std::move(h), at::Tensor()}; }
  static CastSource dswiglu(at::Tensor dy, at::Tensor h) { return {CastOp::kDswiglu, std::move(dy), std::move(h)}; }
};

// The value of `src` in high precision, computed with LibTorch ops (the CPU emulation's
// reference, the health statistics, and casts a backend cannot fuse).
at::Tensor materialize(const CastSource& src);

// A tensor cast to FP8 in one or both layouts from ONE read of the input.
struct Fp8Tensor {
  Fp8Operand rowwise;     // x[M,N] as [M,N]
  Fp8Operand columnwise;  // x[M,N] transposed, as [N,M] (what dgrad/wgrad need on Hopper)
};

// A SwiGLU gradient cast's companion output (kDswiglu only; none while `columnwise` is null): the
// columnwise codes of the forward value silu(gate) * up, cast with slot.scale in slot.format and
// recording nothing (slot.amax is not used), written to *columnwise from the same read of h. They
// are the codes a columnwise cast of the value with that scale gives: the consumer Linear's wgrad
// operand, which its forward then need not keep until the backward.
struct ValueCompanion {
  SlotRef slot;
  Fp8Operand* columnwise = nullptr;
};

// What a Backend::quantize() writes besides the codes (the recipes' CastOptions, lib/fp8/recipes/
// scaling.h, as the backend takes it). rowwise/columnwise: the layouts of a forward cast (a
// gradient source, or a plain tensor with dbias, always gives both). dbias: *dbias = the column
// sums of the value in FP32 (plain and gradient sources only). value: the SwiGLU gradient cast's
// companion output (kDswiglu only; none while value.columnwise is null).
struct QuantizeOptions {
  bool rowwise = true;
  bool columnwise = true;
  at::Tensor* dbias = nullptr;
  ValueCompanion value{};
};

// Which Linear GEMM a product belongs to (selects fast accumulation, names errors).
enum class GemmKind { kFprop, kDgrad, kWgrad };

// How the second operand of a grouped GEMM holds its G operands [Nout, Kc] (Kc: the first
// operand's K, the contraction).
enum class GroupedOperands {
  kStackedRows,     // b [G*Nout, Kc]: operand g is rows [g*Nout, (g+1)*Nout) (a weight's rowwise copy: fprop)
  kStackedColumns,  // b [Nout, G*Kc]: operand g is columns [g*Kc, (g+1)*Kc) (the columnwise copy: dgrad)
};
const char* to_string(GemmKind k);

struct NormForwardResult {
  at::Tensor y;      // normalised output in x's dtype (undefined when not asked for)
  Fp8Tensor y_fp8;   // y cast with the consumer's input slot (empty when no slot was given)
  at::Tensor mean;   // [rows] float32 (LayerNorm only)
  at::Tensor rstd;   // [rows] float32
  at::Tensor sum;    // add_norm_forward only: r = x + h, float32
};

struct NormBackwardResult {
  at::Tensor grad_x;
  at::Tensor grad_gamma;
  at::Tensor grad_beta;  // undefined for RMSNorm or when beta is undefined
  at::Tensor grad_h;     // add_norm_backward only: the gradient of h, in h's dtype
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // THE cast: src (a tensor, or a fused producer's output, CastSource above) to FP8 with
  // slot.scale, max-accumulating max|value| into slot.amax, from one read of the source; scale_inv
  // of the result is 1/scale at cast time. What it produces (QuantizeOptions above):
  //   kIdentity: the asked layouts; with dbias, both layouts and *dbias = sum over rows in FP32.
  //   kGelu, kSwiglu: the asked layouts (dbias is not used).
  //   kDgelu, kDswiglu: both layouts, *dbias when given; kDswiglu also the value companion.
  // CUDA fuses the operations into its cast kernels where it has one for the source (neither the
  // value nor a gradient is written in high precision); anything else, and the CPU emulation, is
  // quantize_unfused below.
  virtual Fp8Tensor quantize(const CastSource& src, const SlotRef& slot, const QuantizeOptions& opt) = 0;

  // quantize() of a plain 2-D tensor (any float dtype) in the asked layouts.
  Fp8Tensor quantize(const at::Tensor& x, const SlotRef& slot, bool rowwise, bool columnwise) {
    return quantize(CastSource::tensor(x), slot, QuantizeOptions{rowwise, columnwise, nullptr, {}});
  }

  // quantize() of a plain gradient: both layouts, and *dbias = sum over rows of dy in FP32 when
  // want_dbias (fused into the cast on the GPU).
  Fp8Tensor quantize_grad(const at::Tensor& dy, const SlotRef& slot, bool want_dbias, at::Tensor* dbias);

  // max-accumulates max|value of src| into amax (0-d float32 on src's device; NaN elements
  // ignored, inf counted: amax_combine) without writing the value: current scaling's amax pass.
  // The default materializes the value (CPU); CUDA runs it in the cast kernels with no output.
  virtual void record_amax(const CastSource& src, const at::Tensor& amax);

  // Current scaling: scale = current_scale(*amax, fp8_max, two_pow_margin) (scaling_math.h) and
  // scale_inv = 1 / scale, all 0-d float32 on one device; no host synchronisation on the GPU.
  virtual void current_scale(const at::Tensor& amax, const at::Tensor& scale, const at::Tensor& scale_inv,
                             float fp8_max, float two_pow_margin) = 0;

  // Current scaling's amax and scale of one cast, in as few launches as the backend manages:
  // amax = known_amax when defined (a producer computed it), else max|value of src| (as
  // record_amax, but SET rather than max-accumulated); then scale and scale_inv as current_scale.
  // amax, scale, scale_inv: 0-d float32 on src's device. workspace: int32 [2] there, zero before
  // its first use and used by one stream only (CUDA: the amax kernel's accumulator and CTA ticket,
  // which every call leaves zero; the default ignores it). The default: record_amax (or a copy of
  // known_amax), then current_scale; CUDA: one launch (kernels/amax.cu, or the scale kernel alone).
  // Returns the value of src in its dtype when the pass wrote it on the way, else an undefined
  // tensor (the default): CUDA writes SwiGLU's value and its gradient, which cost more to evaluate
  // twice than to read back, so the recipe casts that tensor (the same codes) instead of src.
  // may_write_value false: the caller's cast reads src itself (a SwiGLU gradient cast that also
  // writes the value's codes, ValueCompanion), so no value is written and none returned (CUDA:
  // the amax pass that evaluates only the points whose bound may raise the max, one launch).
  virtual at::Tensor current_amax_scale(const CastSource& src, const at::Tensor& known_amax, const at::Tensor& amax,
                                  const at::Tensor& scale, const at::Tensor& scale_inv, const at::Tensor& workspace,
                                  float fp8_max, float two_pow_margin, bool may_write_value = true);

  // out[cols, rows] = codes[rows, cols]^T for uint8 FP8 codes (a layout change, no rounding).
  // The default transposes with ATen (the CPU emulation); CUDA runs kernels/cast_transpose.cu's
  // fp8t_transpose_codes. transposed() below builds operands on it.
  virtual at::Tensor transpose_codes(const at::Tensor& codes);

  // out[M,N] = dequant(a)[M,K] * dequant(b)[N,K]^T (+ bias[N]), out in out_dtype.
  virtual at::Tensor gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                          at::ScalarType out_dtype, GemmKind kind, bool fast_accum) = 0;

  // Grouped GEMMs of a grouped layer (lib/fp8/layers/fp8_grouped_linear.h; a mixture of experts'
  // experts). offsets: int32 [G] on the operands' device, the end of each group (cumulative, the
  // last = the grouped dim's size, each group a multiple of 16); E4M3 operands with per-tensor or
  // per-row scales (kTensor, kRowwise; block scales have no grouped GEMM).
  // fprop / dgrad: out[M,Nout], the rows of group g = dequant(a)[rows of g] * dequant(b_g)^T, b_g
  // [Nout, Kc] as `stacked` says: a weight [G*N, K]'s rowwise copy (fprop, kRowwise scales
  // [G*N]) or its columnwise copy [K, G*N] (dgrad: b_g = W_g^T; kRowwise scales [K], one per
  // input feature over every expert). out in out_dtype.
  // The default (the CPU emulation) runs each group through gemm() on views of the operands (the
  // offsets read on the host); CUDA runs one at::_scaled_grouped_mm (FP32 scale vectors: a
  // per-tensor scale as a constant vector), BF16 out, with no host read.
  virtual at::Tensor grouped_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                  at::ScalarType out_dtype, GemmKind kind, bool fast_accum,
                                  GroupedOperands stacked);
  // wgrad: out[G,N,K], group g = dequant(a)[:, cols of g] * dequant(b)[:, cols of g]^T, a [N,M] and
  // b [K,M] the columnwise copies of the output gradient and the input, the groups along M (the
  // contraction). kRowwise scales are one per row of a and b over all M (per feature over every
  // group's tokens). out in BF16 (the grouped kernel's only output dtype; the emulation rounds its
  // FP32 sums to BF16 alike).
  virtual at::Tensor grouped_gemm_wgrad(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                        bool fast_accum);

  // Layer/RMS normalisation over the last dim of a 2-D x with FP32 statistics. beta may be
  // undefined (no bias; always for RMSNorm). When slot is given, also writes y in FP8; then
  // write_y = false skips the high-precision y (only its FP8 copy is wanted). y_amax (0-d
  // float32, optional, only without a slot): max-accumulates max|y| there in the same pass (the
  // amax a current-scaling cast of y needs); with write_y = false it is all the pass writes
  // besides the statistics (and r of the fused add).
  // norm_backward: dy may have another float dtype than x; grad_x has x's dtype.
  virtual NormForwardResult norm_forward(const at::Tensor& x, const at::Tensor& gamma,
                                         const at::Tensor& beta, double eps, bool rms,
                                         const SlotRef* slot, bool write_y = true,
                                         const at::Tensor& y_amax = at::Tensor()) = 0;
  virtual NormBackwardResult norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                           const at::Tensor& gamma, const at::Tensor& beta,
                                           const at::Tensor& mean, const at::Tensor& rstd,
                                           bool rms) = 0;

  // The residual add fused into the norm: norm_forward of r = x + h (x float32 [rows, cols], h of
  // x's shape and device in any float dtype; r float32, the value an unfused x + h gives), with r
  // returned as `sum`; y (when written) is float32, as norm_forward of r writes it. Its backward:
  // g = norm_backward(dy at r).grad_x + dr (dr float32: the gradient arriving at r from its other
  // use; undefined: none), returned as grad_x (float32, x's gradient) and grad_h (g in h_dtype).
  // The defaults add with ATen and call norm_forward / norm_backward; CUDA runs one kernel each.
  virtual NormForwardResult add_norm_forward(const at::Tensor& x, const at::Tensor& h, const at::Tensor& gamma,
                                             const at::Tensor& beta, double eps, bool rms, const SlotRef* slot,
                                             bool write_y = true, const at::Tensor& y_amax = at::Tensor());
  virtual NormBackwardResult add_norm_backward(const at::Tensor& dy, const at::Tensor& dr, const at::Tensor& r,
                                               const at::Tensor& gamma, const at::Tensor& beta,
                                               const at::Tensor& mean, const at::Tensor& rstd, bool rms,
                                               at::ScalarType h_dtype);

  // One delayed-scaling update of every slot (scaling_math.h update_slot per slot, in one
  // pass / one launch). history [L, S], scale [S], scale_inv [S], fp8_max [S]: float32.
  virtual void update_scaling(at::Tensor& history, at::Tensor& scale, at::Tensor& scale_inv,
                              const at::Tensor& fp8_max, float two_pow_margin, bool use_max,
                              bool recompute) = 0;

  // Fraction of elements of x*scale that saturate (|x*scale| >= fp8_max) and that flush to
  // zero (x != 0 but the code is +-0), for the FP8 health statistics. Returns float32 [2].
  virtual at::Tensor saturation_stats(const at::Tensor& x, const SlotRef& slot) = 0;

 protected:
  // The unfused form of quantize(): the value of src computed with LibTorch (materialize) and cast
  // as a plain tensor by this backend's quantize(); with the value companion, the gradient cast
  // (this backend's quantize() of src) and then the columnwise cast of swiglu(h). The CPU
  // emulation of every fused source, and CUDA's for the sources it has no kernel for.
  Fp8Tensor quantize_unfused(const CastSource& src, const SlotRef& slot, const QuantizeOptions& opt);
};

// The backend for tensors on `device` (CPU emulation, or CUDA when built with it).
Backend& backend_for(const at::Device& device);

// The columnwise copy of a rowwise operand, from its codes alone: the transposed codes with the
// same per-tensor scale_inv (kTensor), or with the transposed block grid (kBlock128x128: a square
// block transposes exactly). These are the codes and scales a cast of both layouts writes, bit for
// bit. A 1x128 or row-wise operand cannot be transposed (its scales run along K): refused.
Fp8Operand transposed(const Fp8Operand& op);

}  // namespace fp8
}  // namespace fp8t
