// The CUDA backend's norms (lib/fp8/backends/cuda_norm.h): kernels/norm_*.cu launched on the current LibTorch
// CUDA stream; outputs come from at::empty on the input's device; no host synchronisation.
#include "lib/fp8/backends/cuda_norm.h"

#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include "fp8t_kernels.h"                       // fp8t_norm_*, fp8t_add_norm_*, fp8t_transpose_codes
#include "lib/fp8/backends/cuda_kernel_args.h"  // kernel_input, format_code, device_scalar, make_operand
#include "lib/util/cuda_tensors.h"              // stream_of, floats_on, bytes_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"                     // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

using cuda::bytes_on;
using cuda::dtype_code;
using cuda::floats_on;
using cuda::stream_of;
using namespace cuda_args;

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
  l.write_y = write_y || (slot == nullptr && !y_amax.defined());  // an amax-only pass writes no y
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

}  // namespace

NormForwardResult cuda_norm_forward(const at::Tensor& x_in, const at::Tensor& gamma, const at::Tensor& beta, double eps,
                               bool rms, const SlotRef* slot, bool write_y, const at::Tensor& y_amax) {
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

NormForwardResult cuda_add_norm_forward(const at::Tensor& x, const at::Tensor& h_in, const at::Tensor& gamma,
                                   const at::Tensor& beta, double eps, bool rms, const SlotRef* slot, bool write_y,
                                   const at::Tensor& y_amax) {
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

NormBackwardResult cuda_norm_backward(const at::Tensor& dy_in, const at::Tensor& x_in, const at::Tensor& gamma,
                                 const at::Tensor& beta, const at::Tensor& mean, const at::Tensor& rstd,
                                 bool rms) {
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

NormBackwardResult cuda_add_norm_backward(const at::Tensor& dy_in, const at::Tensor& dr_in, const at::Tensor& r_in,
                                     const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mean,
                                     const at::Tensor& rstd, bool rms, at::ScalarType h_dtype) {
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

}  // namespace fp8
}  // namespace fp8t
