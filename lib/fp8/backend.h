// FP8 compute backend: HOW tensors are cast to FP8 and multiplied.
//
// The delayed-scaling state machine (delayed_scaling.h), the FP8 modules and the rewrite pass
// are shared; a backend only casts, multiplies and normalises. CpuBackend emulates FP8 exactly
// (quantize -> dequantize, FP32 GEMMs); CudaBackend (cuda_backend_cuda.cpp) uses kernels/
// and cuBLASLt (lib/gemm/). backend_for(device) picks one.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <optional>  // std::optional

#include "lib/fp8/format.h"  // Format

namespace fp8t {
namespace fp8 {

// An optional tensor argument of a custom autograd function: LibTorch's Function::apply takes
// undefined tensors only as std::nullopt.
inline std::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}


// One scaling slot as the casts see it: views into the DelayedScaling state tensors.
struct SlotRef {
  at::Tensor scale;      // 0-d float32: q = fp8(x * scale)
  at::Tensor amax;       // 0-d float32 view of amax_history[0][slot]; the cast max-accumulates |x| here
  Format format = Format::kE4M3;
  int index = -1;        // slot index in the DelayedScaling state (for stats and error messages)
};

// One FP8 operand of a GEMM: uint8 codes of a row-major 2-D tensor whose last dim is the GEMM's K
// (K contiguous, the "T"/"N" layout Hopper needs), plus the factor that dequantizes it.
struct Fp8Operand {
  at::Tensor codes;      // uint8 [rows, K], contiguous
  at::Tensor scale_inv;  // 0-d float32: the scale_inv the codes were cast with (a snapshot)
  Format format = Format::kE4M3;
  bool defined() const { return codes.defined(); }
};

// A tensor cast to FP8 in one or both layouts from ONE read of the input.
struct Fp8Tensor {
  Fp8Operand rowwise;     // x[M,N] as [M,N]
  Fp8Operand columnwise;  // x[M,N] transposed, as [N,M] (what dgrad/wgrad need on Hopper)
};

// Which Linear GEMM a product belongs to (selects fast accumulation, names errors).
enum class GemmKind { kFprop, kDgrad, kWgrad };
const char* to_string(GemmKind k);

struct NormForwardResult {
  at::Tensor y;      // normalised output in x's dtype (undefined when not asked for)
  Fp8Tensor y_fp8;   // y cast with the consumer's input slot (empty when no slot was given)
  at::Tensor mean;   // [rows] float32 (LayerNorm only)
  at::Tensor rstd;   // [rows] float32
};

struct NormBackwardResult {
  at::Tensor grad_x;
  at::Tensor grad_gamma;
  at::Tensor grad_beta;  // undefined for RMSNorm or when beta is undefined
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Cast a 2-D tensor (any float dtype) to FP8 with slot.scale, max-accumulating max|x| into
  // slot.amax. Produces the requested layouts. scale_inv of the result is 1/scale at cast time.
  virtual Fp8Tensor quantize(const at::Tensor& x, const SlotRef& slot, bool rowwise, bool columnwise) = 0;

  // Like quantize (row- and columnwise) for a gradient, also returning dbias = sum over rows of
  // dy in FP32 when want_dbias (fused into the cast on the GPU).
  virtual Fp8Tensor quantize_grad(const at::Tensor& dy, const SlotRef& slot, bool want_dbias,
                                  at::Tensor* dbias) = 0;

  // quantize() of gelu(h) (tanh approximation, in h's dtype) for a 2-D h, and quantize_grad()
  // of the GELU backward at::gelu_backward(dy, h, "tanh") (with dbias of that gradient). The
  // defaults compute the operator and then cast; the GPU fuses both into the cast kernel, so
  // neither gelu(h) nor the gradient is written in high precision.
  virtual Fp8Tensor gelu_quantize(const at::Tensor& h, const SlotRef& slot, bool rowwise, bool columnwise);
  virtual Fp8Tensor dgelu_quantize_grad(const at::Tensor& dy, const at::Tensor& h, const SlotRef& slot,
                                        bool want_dbias, at::Tensor* dbias);

  // out[M,N] = dequant(a)[M,K] * dequant(b)[N,K]^T (+ bias[N]), out in out_dtype.
  virtual at::Tensor gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                          at::ScalarType out_dtype, GemmKind kind, bool fast_accum) = 0;

  // Layer/RMS normalisation over the last dim of a 2-D x with FP32 statistics. beta may be
  // undefined (no bias; always for RMSNorm). When slot is given, also writes y in FP8; then
  // write_y = false skips the high-precision y (only its FP8 copy is wanted).
  // norm_backward: dy may have another float dtype than x; grad_x has x's dtype.
  virtual NormForwardResult norm_forward(const at::Tensor& x, const at::Tensor& gamma,
                                         const at::Tensor& beta, double eps, bool rms,
                                         const SlotRef* slot, bool write_y = true) = 0;
  virtual NormBackwardResult norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                           const at::Tensor& gamma, const at::Tensor& beta,
                                           const at::Tensor& mean, const at::Tensor& rstd,
                                           bool rms) = 0;

  // One delayed-scaling update of every slot (scaling_math.h update_slot per slot, in one
  // pass / one launch). history [L, S], scale [S], scale_inv [S], fp8_max [S]: float32.
  virtual void update_scaling(at::Tensor& history, at::Tensor& scale, at::Tensor& scale_inv,
                              const at::Tensor& fp8_max, float two_pow_margin, bool use_max,
                              bool recompute) = 0;

  // Fraction of elements of x*scale that saturate (|x*scale| >= fp8_max) and that flush to
  // zero (x != 0 but the code is +-0), for the FP8 health statistics. Returns float32 [2].
  virtual at::Tensor saturation_stats(const at::Tensor& x, const SlotRef& slot) = 0;
};

// The backend for tensors on `device` (CPU emulation, or CUDA when built with it).
Backend& backend_for(const at::Device& device);

}  // namespace fp8
}  // namespace fp8t
