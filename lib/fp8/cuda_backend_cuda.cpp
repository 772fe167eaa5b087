// CudaBackend: the FP8 backend for CUDA tensors. Casts, norms and statistics are kernels/ (C API
// in kernels/include/fp8t_kernels.h); GEMMs are lib/gemm/ (cuBLASLt).
//
// Every method only enqueues work on the current LibTorch CUDA stream: no host synchronisation
// (no .item(), no .cpu()), scales and amaxes stay on the device. Outputs and workspaces come from
// at::empty on the input's device, so the caching allocator reuses them step after step.
#include "lib/fp8/cuda_backend.h"

#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAGuard

#include "fp8t_kernels.h"           // fp8t_cast, fp8t_cast_transpose_act, fp8t_norm_*, fp8t_add_norm_*, ...
#include "lib/fp8/block_backend.h"  // is_block_scaled, block_gemm
#include "lib/gemm/gemm_engine.h"   // gemm::fp8_gemm
#include "lib/util/cuda_tensors.h"  // stream_of, floats_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"         // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

using cuda::bytes_on;
using cuda::dtype_code;
using cuda::floats_on;
using cuda::stream_of;


// The kernels read fp32 or bf16; anything else (fp16, fp64) is converted to fp32 first.
at::Tensor kernel_input(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  const at::Tensor y = (t == at::kFloat || t == at::kBFloat16) ? x : x.to(at::kFloat);
  return y.contiguous();
}

int format_code(Format f) { return f == Format::kE4M3 ? FP8T_FORMAT_E4M3 : FP8T_FORMAT_E5M2; }

// A float32 scalar on x's device (slot tensors are views into a recipe's state).
float* device_scalar(const at::Tensor& t, const at::Tensor& x, const char* what, const SlotRef& slot) {
  FP8T_CHECK(t.defined() && t.numel() == 1 && t.scalar_type() == at::kFloat && t.device() == x.device(),
             "fp8 slot ", slot.index, ": ", what, " must be a 1-element float32 tensor on ", x.device().str(),
             t.defined() ? ", got one on " + t.device().str() : std::string(", got none"));
  return t.data_ptr<float>();
}

Fp8Operand make_operand(at::Tensor codes, const at::Tensor& scale_inv, Format f) {
  Fp8Operand op;
  op.codes = std::move(codes);
  op.scale_inv = scale_inv;
  op.format = f;
  return op;
}

// The outputs of one norm forward and the kernel's pointers to them.
struct NormLaunch {
  NormForwardResult r;
  at::Tensor gamma, beta;  // float32, contiguous (beta undefined: none, or RMSNorm)
  bool write_y = true;
  const float* scale = nullptr;
  float* amax = nullptr;
  int format = FP8T_FORMAT_E4M3;
  at::Tensor codes, scale_inv;

  const float* beta_ptr() const { return beta.defined() ? beta.data_ptr<float>() : nullptr; }
  void* y_ptr() const { return write_y ? r.y.data_ptr() : nullptr; }
  float* mean_ptr() const { return r.mean.defined() ? r.mean.data_ptr<float>() : nullptr; }
  uint8_t* codes_ptr() const { return codes.defined() ? codes.data_ptr<uint8_t>() : nullptr; }
  float* scale_inv_ptr() const { return scale_inv.defined() ? scale_inv.data_ptr<float>() : nullptr; }
};

// Allocates the outputs of a norm forward over x [rows, cols] (the kernel's input, or the
// residual of the fused add) with y in y_dtype; the FP8 output when a slot is given.
NormLaunch prepare_norm(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, bool rms,
                        const SlotRef* slot, bool write_y, const at::Tensor& y_amax, at::ScalarType y_dtype) {
  const int64_t rows = x.size(0), cols = x.size(1);
  FP8T_CHECK(gamma.numel() == cols, "norm_forward: gamma has ", gamma.numel(), " elements, rows have ", cols);
  NormLaunch l;
  l.gamma = gamma.to(floats_on(x)).contiguous();
  if (!rms && beta.defined()) l.beta = beta.to(floats_on(x)).contiguous();
  l.write_y = write_y || slot == nullptr;
  if (l.write_y) l.r.y = at::empty({rows, cols}, x.options().dtype(y_dtype));
  l.r.rstd = at::empty({rows}, floats_on(x));
  if (!rms) l.r.mean = at::empty({rows}, floats_on(x));
  if (slot != nullptr) {
    l.scale = device_scalar(slot->scale, x, "scale", *slot);
    l.amax = device_scalar(slot->amax, x, "amax", *slot);
    l.format = format_code(slot->format);
    l.codes = at::empty({rows, cols}, bytes_on(x));
    l.scale_inv = at::empty({}, floats_on(x));
  } else if (y_amax.defined()) {
    l.amax = device_scalar(y_amax, x, "y_amax", SlotRef{});
  }
  return l;
}

// The FP8 output's two layouts: the consumer Linear needs both when training (wgrad reads the
// columnwise copy), so the codes are transposed (1 byte in, 1 out) rather than y re-read.
void finish_norm(NormLaunch& l, const SlotRef* slot, const at::Tensor& x) {
  if (slot == nullptr) return;
  const int64_t rows = x.size(0), cols = x.size(1);
  at::Tensor codes_t = at::empty({cols, rows}, bytes_on(x));
  FP8T_KERNEL_CHECK(fp8t_transpose_codes(l.codes.data_ptr<uint8_t>(), rows, cols, codes_t.data_ptr<uint8_t>(),
                                         stream_of(x)),
                    "norm_forward: transpose of the FP8 output ", rows, "x", cols);
  l.r.y_fp8.rowwise = make_operand(l.codes, l.scale_inv, slot->format);
  l.r.y_fp8.columnwise = make_operand(codes_t, l.scale_inv, slot->format);
}

// The inputs and parameter-gradient outputs of one norm backward over x [rows, cols].
struct NormGrads {
  at::Tensor gamma, mean, rstd;  // float32, contiguous (mean undefined for RMSNorm)
  at::Tensor dgamma, dbeta;      // dbeta undefined for RMSNorm or without beta
  at::Tensor workspace;

  float* mean_ptr() const { return mean.defined() ? mean.data_ptr<float>() : nullptr; }
  float* dbeta_ptr() const { return dbeta.defined() ? dbeta.data_ptr<float>() : nullptr; }
  // Parameter gradients in the parameters' dtype (autograd requires it); FP32 accumulation.
  void finish(NormBackwardResult& r, const at::Tensor& gamma_param, const at::Tensor& beta_param) const {
    r.grad_gamma = dgamma.to(gamma_param.scalar_type());
    if (dbeta.defined()) r.grad_beta = dbeta.to(beta_param.scalar_type());
  }
};

NormGrads prepare_norm_grads(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta,
                             const at::Tensor& mean, const at::Tensor& rstd, bool rms) {
  const int64_t rows = x.size(0), cols = x.size(1);
  NormGrads n;
  n.gamma = gamma.to(floats_on(x)).contiguous();
  n.rstd = rstd.to(floats_on(x)).contiguous();
  if (!rms) n.mean = mean.to(floats_on(x)).contiguous();
  n.dgamma = at::empty({cols}, floats_on(x));
  if (!rms && beta.defined()) n.dbeta = at::empty({cols}, floats_on(x));
  n.workspace = at::empty({static_cast<int64_t>(fp8t_norm_backward_workspace_bytes(rows, cols))}, bytes_on(x));
  return n;
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  Fp8Tensor quantize(const at::Tensor& x_in, const SlotRef& slot, bool rowwise, bool columnwise) override {
    return cast(x_in, slot, rowwise, columnwise, nullptr);
  }

  Fp8Tensor quantize_grad(const at::Tensor& dy, const SlotRef& slot, bool want_dbias, at::Tensor* dbias) override {
    FP8T_CHECK(!want_dbias || dbias != nullptr, "quantize_grad: want_dbias needs an output tensor");
    return cast(dy, slot, true, true, want_dbias ? dbias : nullptr);
  }

  Fp8Tensor gelu_quantize(const at::Tensor& h, const SlotRef& slot, bool rowwise, bool columnwise) override {
    return cast(h, slot, rowwise, columnwise, nullptr, Act::kGelu);
  }

  Fp8Tensor dgelu_quantize_grad(const at::Tensor& dy, const at::Tensor& h, const SlotRef& slot, bool want_dbias,
                                at::Tensor* dbias) override {
    FP8T_CHECK(!want_dbias || dbias != nullptr, "dgelu_quantize_grad: want_dbias needs an output tensor");
    FP8T_CHECK(dy.sizes() == h.sizes(), "dgelu_quantize_grad: dy ", dy.sizes(), " and h ", h.sizes(),
               " differ in shape");
    return cast(dy, slot, true, true, want_dbias ? dbias : nullptr, Act::kDgelu, &h);
  }

  Fp8Tensor swiglu_quantize(const at::Tensor& h, const SlotRef& slot, bool rowwise, bool columnwise) override {
    if (!swiglu_kernel_dtype(h)) return Backend::swiglu_quantize(h, slot, rowwise, columnwise);
    return swiglu_cast(at::Tensor(), h, &slot, rowwise, columnwise, nullptr, at::Tensor());
  }

  Fp8Tensor dswiglu_quantize_grad(const at::Tensor& dy, const at::Tensor& h, const SlotRef& slot, bool want_dbias,
                                  at::Tensor* dbias) override {
    FP8T_CHECK(!want_dbias || dbias != nullptr, "dswiglu_quantize_grad: want_dbias needs an output tensor");
    if (!swiglu_kernel_dtype(h)) return Backend::dswiglu_quantize_grad(dy, h, slot, want_dbias, dbias);
    return swiglu_cast(dy, h, &slot, true, true, want_dbias ? dbias : nullptr, at::Tensor());
  }

  at::Tensor gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype,
                  GemmKind kind, bool fast_accum) override {
    FP8T_CHECK(a.defined() && b.defined(), "fp8 gemm ", to_string(kind), ": missing FP8 operand (A ",
               a.defined() ? "set" : "missing", ", B ", b.defined() ? "set" : "missing", ")");
    if (is_block_scaled(a) || is_block_scaled(b)) return block_gemm(a, b, bias, out_dtype, kind);
    return gemm::fp8_gemm(a.codes, a.format, a.scale_inv, b.codes, b.format, b.scale_inv, bias, out_dtype,
                          fast_accum, to_string(kind));
  }

  NormForwardResult norm_forward(const at::Tensor& x_in, const at::Tensor& gamma, const at::Tensor& beta, double eps,
                                 bool rms, const SlotRef* slot, bool write_y, const at::Tensor& y_amax) override {
    FP8T_CHECK(x_in.dim() == 2 && x_in.is_cuda(), "norm_forward expects a 2-D CUDA tensor, got ", x_in.sizes(), " on ",
               x_in.device().str());
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = kernel_input(x_in);
    NormLaunch l = prepare_norm(x, gamma, beta, rms, slot, write_y, y_amax, x.scalar_type());
    FP8T_KERNEL_CHECK(fp8t_norm_forward(x.data_ptr(), dtype_code(x), x.size(0), x.size(1), l.gamma.data_ptr<float>(),
                                        l.beta_ptr(), static_cast<float>(eps), rms ? 1 : 0, l.y_ptr(), l.mean_ptr(),
                                        l.r.rstd.data_ptr<float>(), l.scale, l.format, l.codes_ptr(), l.amax,
                                        l.scale_inv_ptr(), stream_of(x)),
                      rms ? "RMSNorm" : "LayerNorm", " forward of ", x.scalar_type(), " ", x.sizes(),
                      slot != nullptr ? " with FP8 output" : "");
    finish_norm(l, slot, x);
    if (l.write_y && l.r.y.scalar_type() != x_in.scalar_type()) l.r.y = l.r.y.to(x_in.scalar_type());
    return std::move(l.r);
  }

  NormForwardResult add_norm_forward(const at::Tensor& x, const at::Tensor& h_in, const at::Tensor& gamma,
                                     const at::Tensor& beta, double eps, bool rms, const SlotRef* slot, bool write_y,
                                     const at::Tensor& y_amax) override {
    FP8T_CHECK(x.dim() == 2 && x.is_cuda() && x.scalar_type() == at::kFloat && h_in.sizes() == x.sizes() &&
                   h_in.device() == x.device(),
               "add_norm_forward expects a 2-D float32 CUDA x and h of its shape and device, got x ", x.scalar_type(),
               " ", x.sizes(), " on ", x.device().str(), ", h ", h_in.scalar_type(), " ", h_in.sizes(), " on ",
               h_in.device().str());
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous();
    const at::Tensor h = kernel_input(h_in);
    NormLaunch l = prepare_norm(xc, gamma, beta, rms, slot, write_y, y_amax, at::kFloat);
    l.r.sum = at::empty_like(xc);
    FP8T_KERNEL_CHECK(fp8t_add_norm_forward(xc.data_ptr<float>(), h.data_ptr(), dtype_code(h), xc.size(0), xc.size(1),
                                            l.r.sum.data_ptr<float>(), l.gamma.data_ptr<float>(), l.beta_ptr(),
                                            static_cast<float>(eps), rms ? 1 : 0, l.y_ptr(), FP8T_DTYPE_F32,
                                            l.mean_ptr(), l.r.rstd.data_ptr<float>(), l.scale, l.format,
                                            l.codes_ptr(), l.amax, l.scale_inv_ptr(), stream_of(xc)),
                      rms ? "RMSNorm" : "LayerNorm", " forward of x + h, ", xc.sizes(), " h ", h.scalar_type(),
                      slot != nullptr ? " with FP8 output" : "");
    finish_norm(l, slot, xc);
    return std::move(l.r);
  }

  NormBackwardResult norm_backward(const at::Tensor& dy_in, const at::Tensor& x_in, const at::Tensor& gamma,
                                   const at::Tensor& beta, const at::Tensor& mean, const at::Tensor& rstd,
                                   bool rms) override {
    FP8T_CHECK(x_in.dim() == 2 && x_in.is_cuda() && dy_in.sizes() == x_in.sizes(),
               "norm_backward expects 2-D CUDA x and dy of one shape, got ", x_in.sizes(), " and ", dy_in.sizes());
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = kernel_input(x_in);
    const at::Tensor dy = kernel_input(dy_in);  // fp32 or bf16, independently of x
    NormGrads n = prepare_norm_grads(x, gamma, beta, mean, rstd, rms);
    NormBackwardResult r;
    r.grad_x = at::empty_like(x);
    FP8T_KERNEL_CHECK(fp8t_norm_backward(dy.data_ptr(), dtype_code(dy), x.data_ptr(), dtype_code(x), x.size(0),
                                         x.size(1), n.gamma.data_ptr<float>(), n.mean_ptr(), n.rstd.data_ptr<float>(),
                                         rms ? 1 : 0, r.grad_x.data_ptr(), n.dgamma.data_ptr<float>(), n.dbeta_ptr(),
                                         n.workspace.data_ptr(), stream_of(x)),
                      rms ? "RMSNorm" : "LayerNorm", " backward of ", x.scalar_type(), " ", x.sizes(), ", dy ",
                      dy.scalar_type());
    if (r.grad_x.scalar_type() != x_in.scalar_type()) r.grad_x = r.grad_x.to(x_in.scalar_type());
    n.finish(r, gamma, beta);
    return r;
  }

  NormBackwardResult add_norm_backward(const at::Tensor& dy_in, const at::Tensor& dr_in, const at::Tensor& r_in,
                                       const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mean,
                                       const at::Tensor& rstd, bool rms, at::ScalarType h_dtype) override {
    FP8T_CHECK(r_in.dim() == 2 && r_in.is_cuda() && r_in.scalar_type() == at::kFloat && dy_in.sizes() == r_in.sizes() &&
                   (!dr_in.defined() || dr_in.sizes() == r_in.sizes()),
               "add_norm_backward expects a 2-D float32 CUDA r and dy (and dr) of its shape, got r ", r_in.scalar_type(),
               " ", r_in.sizes(), ", dy ", dy_in.sizes());
    const c10::cuda::CUDAGuard guard(r_in.device());
    const at::Tensor r = r_in.contiguous();
    const at::Tensor dy = kernel_input(dy_in);
    const at::Tensor dr = dr_in.defined() ? dr_in.to(floats_on(r)).contiguous() : at::Tensor();
    NormGrads n = prepare_norm_grads(r, gamma, beta, mean, rstd, rms);
    NormBackwardResult out;
    out.grad_x = at::empty_like(r);
    // An FP32 h takes x's gradient itself (as autograd's add does); bf16 gets its own copy, fp16
    // a conversion of the FP32 one.
    const bool dh_kernel = h_dtype == at::kBFloat16;
    if (dh_kernel) out.grad_h = at::empty(r.sizes(), r.options().dtype(at::kBFloat16));
    FP8T_KERNEL_CHECK(fp8t_add_norm_backward(dy.data_ptr(), dtype_code(dy), r.data_ptr<float>(),
                                             dr.defined() ? dr.data_ptr<float>() : nullptr, r.size(0), r.size(1),
                                             n.gamma.data_ptr<float>(), n.mean_ptr(), n.rstd.data_ptr<float>(),
                                             rms ? 1 : 0, out.grad_x.data_ptr<float>(),
                                             dh_kernel ? out.grad_h.data_ptr() : nullptr, FP8T_DTYPE_BF16,
                                             n.dgamma.data_ptr<float>(), n.dbeta_ptr(), n.workspace.data_ptr(),
                                             stream_of(r)),
                      rms ? "RMSNorm" : "LayerNorm", " backward of x + h, ", r.sizes(), ", dy ", dy.scalar_type(),
                      dr.defined() ? " with a residual gradient" : "");
    if (!dh_kernel) out.grad_h = out.grad_x.to(h_dtype);
    n.finish(out, gamma, beta);
    return out;
  }

  void update_scaling(at::Tensor& history, at::Tensor& scale, at::Tensor& scale_inv, const at::Tensor& fp8_max,
                      float two_pow_margin, bool use_max, bool recompute) override {
    FP8T_CHECK(history.dim() == 2 && history.is_cuda() && history.is_contiguous() &&
                   history.scalar_type() == at::kFloat,
               "update_scaling: history must be a contiguous float32 CUDA tensor [L, S], got ", history.sizes());
    const int64_t slots = history.size(1);
    const at::Tensor* per_slot[] = {&scale, &scale_inv, &fp8_max};
    for (const at::Tensor* t : per_slot) {
      FP8T_CHECK(t->numel() == slots && t->is_contiguous() && t->scalar_type() == at::kFloat &&
                     t->device() == history.device(),
                 "update_scaling: scale, scale_inv and fp8_max must be contiguous float32 [", slots, "] on ",
                 history.device().str());
    }
    if (slots == 0) return;
    const c10::cuda::CUDAGuard guard(history.device());
    FP8T_KERNEL_CHECK(fp8t_delayed_scaling_update(history.data_ptr<float>(), scale.data_ptr<float>(),
                                                  scale_inv.data_ptr<float>(), fp8_max.data_ptr<float>(),
                                                  static_cast<int>(slots), static_cast<int>(history.size(0)),
                                                  two_pow_margin, use_max ? 1 : 0, recompute ? 1 : 0,
                                                  stream_of(history)),
                      "update_scaling of ", slots, " slots, history ", history.size(0));
  }

  // A max-accumulating amax of any source: the cast kernels with both outputs null read it
  // (evaluating GELU or its backward in the kernel). Current scaling's casts use the dedicated
  // amax kernel instead (current_amax_scale), which also computes the scale.
  void record_amax(const CastSource& src, const at::Tensor& amax) override {
    if (src.op == CastOp::kSwiglu || src.op == CastOp::kDswiglu) {
      const bool backward = src.op == CastOp::kDswiglu;
      const at::Tensor& h = backward ? src.h : src.x;
      if (!swiglu_kernel_dtype(h)) return Backend::record_amax(src, amax);
      swiglu_cast(backward ? src.x : at::Tensor(), h, nullptr, false, false, nullptr, amax);
      return;
    }
    FP8T_CHECK(src.x.is_cuda() && src.x.dim() == 2, "fp8 amax pass expects a 2-D CUDA tensor, got ", src.x.sizes(),
               " on ", src.x.device().str());
    const c10::cuda::CUDAGuard guard(src.x.device());
    const Act act = src.op == CastOp::kGelu ? Act::kGelu : (src.op == CastOp::kDgelu ? Act::kDgelu : Act::kNone);
    FP8T_CHECK(src.op == CastOp::kIdentity || act != Act::kNone, "fp8 amax pass: no CUDA kernel for cast operation ",
               static_cast<int>(src.op));
    const at::Tensor h = act == Act::kDgelu ? kernel_input(src.h) : at::Tensor();
    const at::Tensor x = act == Act::kDgelu ? src.x.to(h.scalar_type()).contiguous() : kernel_input(src.x);
    const at::Tensor unit = at::ones({}, floats_on(x));  // the kernels need a scale; no code is written
    FP8T_KERNEL_CHECK(fp8t_cast_transpose_act(static_cast<int>(act), x.data_ptr(), h.defined() ? h.data_ptr() : nullptr,
                                              dtype_code(x), x.size(0), x.size(1), unit.data_ptr<float>(),
                                              FP8T_FORMAT_E4M3, nullptr, nullptr,
                                              device_scalar(amax, x, "amax", SlotRef{}), nullptr, nullptr, nullptr,
                                              stream_of(x)),
                      "fp8 amax pass of ", x.scalar_type(), " ", x.sizes());
  }

  void current_scale(const at::Tensor& amax, const at::Tensor& scale, const at::Tensor& scale_inv, float fp8_max,
                     float two_pow_margin) override {
    const c10::cuda::CUDAGuard guard(amax.device());
    FP8T_KERNEL_CHECK(fp8t_current_scale(device_scalar(amax, amax, "amax", SlotRef{}), fp8_max, two_pow_margin,
                                         device_scalar(scale, amax, "scale", SlotRef{}),
                                         device_scalar(scale_inv, amax, "scale_inv", SlotRef{}), nullptr,
                                         stream_of(amax)),
                      "current scale from an amax on ", amax.device().str());
  }

  // One launch per cast: the amax pass that also computes the scale (kernels/amax.cu), or, with a
  // producer's amax, the scale kernel that also records it.
  void current_amax_scale(const CastSource& src, const at::Tensor& known_amax, const at::Tensor& amax,
                          const at::Tensor& scale, const at::Tensor& scale_inv, const at::Tensor& workspace,
                          float fp8_max, float two_pow_margin) override {
    FP8T_CHECK(src.x.is_cuda(), "fp8 amax pass expects a CUDA tensor, got one on ", src.x.device().str());
    const c10::cuda::CUDAGuard guard(src.x.device());
    float* a = device_scalar(amax, src.x, "amax", SlotRef{});
    float* s = device_scalar(scale, src.x, "scale", SlotRef{});
    float* si = device_scalar(scale_inv, src.x, "scale_inv", SlotRef{});
    if (known_amax.defined()) {
      FP8T_KERNEL_CHECK(fp8t_current_scale(device_scalar(known_amax, src.x, "known amax", SlotRef{}), fp8_max,
                                           two_pow_margin, s, si, a, stream_of(src.x)),
                        "current scale from a producer's amax on ", src.x.device().str());
      return;
    }
    const AmaxInputs in = amax_inputs(src);
    if (!in.x.defined()) {
      Backend::current_amax_scale(src, known_amax, amax, scale, scale_inv, workspace, fp8_max, two_pow_margin);
      return;
    }
    FP8T_CHECK(workspace.defined() && workspace.numel() == 2 && workspace.scalar_type() == at::kInt &&
                   workspace.device() == src.x.device() && workspace.is_contiguous(),
               "fp8 amax pass: the workspace must be a contiguous int32 [2] on ", src.x.device().str());
    FP8T_KERNEL_CHECK(fp8t_amax_scale(in.act, in.x.data_ptr(), in.h.defined() ? in.h.data_ptr() : nullptr,
                                      dtype_code(in.x), in.rows, in.cols, a,
                                      reinterpret_cast<unsigned int*>(workspace.data_ptr<int32_t>()), fp8_max,
                                      two_pow_margin, s, si, stream_of(in.x)),
                      "fp8 amax pass (operation ", in.act, ") of ", in.x.scalar_type(), " ", in.x.sizes());
  }

  at::Tensor saturation_stats(const at::Tensor& x_in, const SlotRef& slot) override {
    FP8T_CHECK(x_in.is_cuda(), "saturation_stats expects a CUDA tensor, got one on ", x_in.device().str());
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = kernel_input(x_in);
    at::Tensor out = at::empty({2}, floats_on(x));
    at::Tensor counters = at::empty({2}, at::TensorOptions().dtype(at::kLong).device(x.device()));
    FP8T_KERNEL_CHECK(fp8t_saturation_stats(x.data_ptr(), dtype_code(x), x.numel(), device_scalar(slot.scale, x, "scale", slot),
                                            format_code(slot.format), out.data_ptr<float>(),
                                            reinterpret_cast<unsigned long long*>(counters.data_ptr<int64_t>()),
                                            stream_of(x)),
                      "fp8 saturation stats of ", x.scalar_type(), " ", x.sizes(), " (slot ", slot.index, ")");
    return out;
  }

 private:
  // The SwiGLU kernels read fp32 or bf16; other dtypes (fp16 would round where at::silu rounds in
  // fp16) take the LibTorch composition and a plain cast.
  static bool swiglu_kernel_dtype(const at::Tensor& h) {
    return h.scalar_type() == at::kFloat || h.scalar_type() == at::kBFloat16;
  }

  // One launch of kernels/swiglu_cast.cu: the forward of h [rows, 2F] when dy is undefined, else
  // the backward of dy [rows, F] at h, cast with the slot's scale. Without a slot: the amax pass of
  // current scaling into amax_only (no codes, no scale).
  static Fp8Tensor swiglu_cast(const at::Tensor& dy_in, const at::Tensor& h_in, const SlotRef* slot, bool rowwise,
                               bool columnwise, at::Tensor* dbias, const at::Tensor& amax_only) {
    const bool backward = dy_in.defined();
    const char* what = backward ? "fp8 swiglu-backward cast" : "fp8 swiglu cast";
    FP8T_CHECK(h_in.is_cuda() && h_in.dim() == 2 && h_in.size(1) % 2 == 0, what,
               " expects a 2-D CUDA input [rows, 2F] = [gate | up], got ", h_in.sizes(), " on ", h_in.device().str());
    const c10::cuda::CUDAGuard guard(h_in.device());
    const at::Tensor h = h_in.contiguous();
    const int64_t rows = h.size(0), f = h.size(1) / 2, width = backward ? 2 * f : f;
    FP8T_CHECK(!backward || dy_in.sizes() == at::IntArrayRef({rows, f}), what, ": dy ", dy_in.sizes(),
               " does not match the input ", h.sizes());
    // dy in h's dtype, as autograd hands the activation's gradient to silu's backward.
    const at::Tensor dy = backward ? dy_in.to(h.scalar_type()).contiguous() : at::Tensor();
    const SlotRef unit_slot;  // names no slot in the amax pass's error messages
    const SlotRef& s = slot != nullptr ? *slot : unit_slot;
    at::Tensor codes = rowwise ? at::empty({rows, width}, bytes_on(h)) : at::Tensor();
    at::Tensor codes_t = columnwise ? at::empty({width, rows}, bytes_on(h)) : at::Tensor();
    at::Tensor scale_inv = slot != nullptr ? at::empty({}, floats_on(h)) : at::Tensor();
    at::Tensor ws;
    if (dbias != nullptr) {
      *dbias = at::empty({width}, floats_on(h));
      ws = at::empty({static_cast<int64_t>(fp8t_dswiglu_cast_transpose_workspace_bytes(rows, f))}, bytes_on(h));
    }
    const float* scale = slot != nullptr ? device_scalar(s.scale, h, "scale", s) : nullptr;
    float* amax = device_scalar(slot != nullptr ? s.amax : amax_only, h, "amax", s);
    uint8_t* row = rowwise ? codes.data_ptr<uint8_t>() : nullptr;
    uint8_t* col = columnwise ? codes_t.data_ptr<uint8_t>() : nullptr;
    float* sinv = slot != nullptr ? scale_inv.data_ptr<float>() : nullptr;
    FP8T_KERNEL_CHECK(backward ? fp8t_dswiglu_cast_transpose(dy.data_ptr(), h.data_ptr(), dtype_code(h), rows, f, scale,
                                                             format_code(s.format), row, col, amax, sinv,
                                                             dbias != nullptr ? dbias->data_ptr<float>() : nullptr,
                                                             dbias != nullptr ? ws.data_ptr() : nullptr, stream_of(h))
                               : fp8t_swiglu_cast_transpose(h.data_ptr(), dtype_code(h), rows, f, scale,
                                                            format_code(s.format), row, col, amax, sinv, stream_of(h)),
                      what, dbias != nullptr ? "+dbias" : "", " of ", h.scalar_type(), " ", h.sizes(), " (slot ",
                      s.index, ")");
    Fp8Tensor out;
    if (rowwise) out.rowwise = make_operand(codes, scale_inv, s.format);
    if (columnwise) out.columnwise = make_operand(codes_t, scale_inv, s.format);
    return out;
  }

  // The inputs of fp8t_amax_scale for a source, converted as the cast converts them (so the pass
  // sees the cast's values); x undefined when no kernel evaluates the source (SwiGLU of fp16).
  struct AmaxInputs {
    int act = FP8T_ACT_NONE;
    at::Tensor x, h;
    int64_t rows = 0, cols = 0;
  };
  static AmaxInputs amax_inputs(const CastSource& src) {
    AmaxInputs in;
    switch (src.op) {
      case CastOp::kIdentity:
      case CastOp::kGelu:
        in.act = src.op == CastOp::kGelu ? FP8T_ACT_GELU : FP8T_ACT_NONE;
        in.x = kernel_input(src.x);
        in.rows = 1, in.cols = in.x.numel();  // flat: the value is elementwise
        return in;
      case CastOp::kDgelu:
        FP8T_CHECK(src.x.sizes() == src.h.sizes(), "fp8 amax pass: dy ", src.x.sizes(), " and h ", src.h.sizes(),
                   " differ in shape");
        in.act = FP8T_ACT_DGELU;
        in.h = kernel_input(src.h);
        in.x = src.x.to(in.h.scalar_type()).contiguous();  // dy in h's dtype, as the cast reads it
        in.rows = 1, in.cols = in.x.numel();
        return in;
      case CastOp::kSwiglu:
      case CastOp::kDswiglu: break;
    }
    const bool backward = src.op == CastOp::kDswiglu;
    const at::Tensor& h = backward ? src.h : src.x;
    if (!swiglu_kernel_dtype(h)) return in;
    FP8T_CHECK(h.dim() == 2 && h.size(1) % 2 == 0, "fp8 swiglu amax pass expects h [rows, 2F], got ", h.sizes());
    in.act = backward ? FP8T_ACT_DSWIGLU : FP8T_ACT_SWIGLU;
    in.rows = h.size(0), in.cols = h.size(1) / 2;
    if (backward) {
      FP8T_CHECK(src.x.sizes() == at::IntArrayRef({in.rows, in.cols}), "fp8 swiglu amax pass: dy ", src.x.sizes(),
                 " does not match h ", h.sizes());
      in.h = h.contiguous();
      in.x = src.x.to(h.scalar_type()).contiguous();
    } else {
      in.x = h.contiguous();
    }
    return in;
  }

  // What a cast reads: x, gelu(x), or the GELU backward of x = dy at h (the kernels' codes).
  enum class Act : int { kNone = FP8T_ACT_NONE, kGelu = FP8T_ACT_GELU, kDgelu = FP8T_ACT_DGELU };

  // Where a cast puts its results, besides the codes.
  struct CastTarget {
    float* scale;
    float* amax;
    at::Tensor scale_inv;  // 0-d: the snapshot 1 / scale stored with the codes
    cudaStream_t stream;
  };

  // One read of x: rowwise only -> fp8t_cast (any shape); any columnwise copy, a dbias or an
  // activation -> fp8t_cast_transpose_act (2-D).
  Fp8Tensor cast(const at::Tensor& x_in, const SlotRef& slot, bool rowwise, bool columnwise, at::Tensor* dbias,
                 Act act = Act::kNone, const at::Tensor* h_in = nullptr) {
    FP8T_CHECK(x_in.is_cuda(), "fp8 cast (slot ", slot.index, ") expects a CUDA tensor, got one on ",
               x_in.device().str());
    const c10::cuda::CUDAGuard guard(x_in.device());
    // The GELU backward reads dy in h's dtype (as at::gelu_backward computes in h's dtype).
    const at::Tensor h = act == Act::kDgelu ? kernel_input(*h_in) : at::Tensor();
    const at::Tensor x = act == Act::kDgelu ? x_in.to(h.scalar_type()).contiguous() : kernel_input(x_in);
    const CastTarget t{device_scalar(slot.scale, x, "scale", slot), device_scalar(slot.amax, x, "amax", slot),
                       at::empty({}, floats_on(x)), stream_of(x)};
    if (!columnwise && dbias == nullptr && act == Act::kNone) return cast_elementwise(x, slot, rowwise, t);
    return cast_transpose(x, h, slot, rowwise, columnwise, dbias, act, t);
  }

  // With neither layout requested the cast still records the amax (the codes are dropped).
  static Fp8Tensor cast_elementwise(const at::Tensor& x, const SlotRef& slot, bool rowwise, const CastTarget& t) {
    at::Tensor codes = at::empty(x.sizes(), bytes_on(x));
    FP8T_KERNEL_CHECK(fp8t_cast(x.data_ptr(), dtype_code(x), x.numel(), t.scale, format_code(slot.format),
                                codes.data_ptr<uint8_t>(), t.amax, t.scale_inv.data_ptr<float>(), t.stream),
                      "fp8 cast of ", x.scalar_type(), " ", x.sizes(), " (slot ", slot.index, ")");
    Fp8Tensor out;
    if (rowwise) out.rowwise = make_operand(codes, t.scale_inv, slot.format);
    return out;
  }

  static Fp8Tensor cast_transpose(const at::Tensor& x, const at::Tensor& h, const SlotRef& slot, bool rowwise,
                                  bool columnwise, at::Tensor* dbias, Act act, const CastTarget& t) {
    static constexpr const char* kWhat[] = {"fp8 cast+transpose", "fp8 gelu cast", "fp8 gelu-backward cast"};
    const char* what = kWhat[static_cast<int>(act)];
    FP8T_CHECK(x.dim() == 2, what, " (slot ", slot.index, ") expects a 2-D tensor, got ", x.sizes());
    FP8T_CHECK(act != Act::kGelu || dbias == nullptr, what, ": no dbias");
    const int64_t rows = x.size(0), cols = x.size(1);
    at::Tensor codes = rowwise ? at::empty({rows, cols}, bytes_on(x)) : at::Tensor();
    at::Tensor codes_t = columnwise ? at::empty({cols, rows}, bytes_on(x)) : at::Tensor();
    at::Tensor ws;
    if (dbias != nullptr) {
      *dbias = at::empty({cols}, floats_on(x));
      ws = at::empty({static_cast<int64_t>(fp8t_cast_transpose_dbias_workspace_bytes(rows, cols))}, bytes_on(x));
    }
    FP8T_KERNEL_CHECK(fp8t_cast_transpose_act(static_cast<int>(act), x.data_ptr(), h.defined() ? h.data_ptr() : nullptr,
                                              dtype_code(x), rows, cols, t.scale, format_code(slot.format),
                                              rowwise ? codes.data_ptr<uint8_t>() : nullptr,
                                              columnwise ? codes_t.data_ptr<uint8_t>() : nullptr, t.amax,
                                              t.scale_inv.data_ptr<float>(),
                                              dbias != nullptr ? dbias->data_ptr<float>() : nullptr,
                                              dbias != nullptr ? ws.data_ptr() : nullptr, t.stream),
                      what, dbias != nullptr ? "+dbias" : "", " of ", x.scalar_type(), " ", x.sizes(), " (slot ",
                      slot.index, ")");
    Fp8Tensor out;
    if (rowwise) out.rowwise = make_operand(codes, t.scale_inv, slot.format);
    if (columnwise) out.columnwise = make_operand(codes_t, t.scale_inv, slot.format);
    return out;
  }
};

}  // namespace

Backend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace fp8
}  // namespace fp8t
