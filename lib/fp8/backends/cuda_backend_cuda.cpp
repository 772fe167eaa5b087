// CudaBackend: the FP8 backend for CUDA tensors. Casts, norms and statistics are kernels/ (C API
// in kernels/include/fp8t_kernels.h; the norms' launches in cuda_norm_cuda.cpp); GEMMs are lib/gemm/
// (cuBLASLt).
//
// Every method only enqueues work on the current LibTorch CUDA stream: no host synchronisation
// (no .item(), no .cpu()), scales and amaxes stay on the device. Outputs and workspaces come from
// at::empty on the input's device, so the caching allocator reuses them step after step.
#include "lib/fp8/backends/cuda_backend.h"

#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAGuard

#include "fp8t_kernels.h"                       // fp8t_cast, fp8t_cast_transpose_act, fp8t_norm_*, fp8t_add_norm_*, ...
#include "lib/fp8/backends/rowwise_quantize.h"  // is_row_scaled, rowwise_gemm
#include "lib/fp8/backends/block_backend.h"     // is_block_scaled, block_gemm
#include "lib/fp8/backends/cuda_kernel_args.h"  // kernel_input, format_code, device_scalar, make_operand
#include "lib/fp8/backends/cuda_norm.h"         // cuda_norm_forward, cuda_add_norm_forward, ..._backward
#include "lib/fp8/backends/grouped_gemm.h"      // grouped_gemm_cuda, grouped_gemm_wgrad_cuda
#include "lib/gemm/gemm_engine.h"               // gemm::fp8_gemm
#include "lib/util/cuda_tensors.h"              // stream_of, floats_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"                     // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

using cuda::bytes_on;
using cuda::dtype_code;
using cuda::floats_on;
using cuda::stream_of;
using namespace cuda_args;

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  // Each source to its kernel (the fused activation casts of kernels/cast_transpose.cu and
  // kernels/swiglu_cast.cu); a source no kernel takes is cast unfused (Backend::quantize_unfused).
  Fp8Tensor quantize(const CastSource& src, const SlotRef& slot, const QuantizeOptions& opt) override {
    if (opt.value.columnwise != nullptr) return dswiglu_quantize_grad_with_value(src, slot, opt);
    const at::Tensor& x = src.x;
    switch (src.op) {
      case CastOp::kIdentity:
        return opt.dbias != nullptr ? cast(x, slot, true, true, opt.dbias)
                                    : cast(x, slot, opt.rowwise, opt.columnwise, nullptr);
      case CastOp::kGelu: return cast(x, slot, opt.rowwise, opt.columnwise, nullptr, Act::kGelu);
      case CastOp::kDgelu:
        FP8T_CHECK(x.sizes() == src.h.sizes(), "dgelu cast: dy ", x.sizes(), " and h ", src.h.sizes(),
                   " differ in shape");
        return cast(x, slot, true, true, opt.dbias, Act::kDgelu, &src.h);
      case CastOp::kSwiglu:
        if (!swiglu_kernel_dtype(x)) return quantize_unfused(src, slot, opt);
        return swiglu_cast(at::Tensor(), x, &slot, opt.rowwise, opt.columnwise, nullptr, at::Tensor());
      case CastOp::kDswiglu:
        if (!swiglu_kernel_dtype(src.h)) return quantize_unfused(src, slot, opt);
        return swiglu_cast(x, src.h, &slot, true, true, opt.dbias, at::Tensor());
    }
    FP8T_THROW(ExitCode::kFailure, "fp8 cast: unknown cast operation ", static_cast<int>(src.op));
  }

  // One at::_scaled_grouped_mm each (grouped_gemm.h): no host read of the group sizes.
  at::Tensor grouped_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets, at::ScalarType out_dtype,
                          GemmKind kind, bool fast_accum, GroupedOperands stacked) override {
    (void)kind;
    return grouped_gemm_cuda(a, b, offsets, out_dtype, fast_accum, stacked);
  }
  at::Tensor grouped_gemm_wgrad(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                bool fast_accum) override {
    return grouped_gemm_wgrad_cuda(a, b, offsets, fast_accum);
  }

  // The tiled byte transpose of the cast kernels (1 byte read and 1 written per code).
  at::Tensor transpose_codes(const at::Tensor& codes_in) override {
    FP8T_CHECK(codes_in.dim() == 2 && codes_in.is_cuda() && codes_in.scalar_type() == at::kByte,
               "transpose_codes expects 2-D uint8 CUDA codes, got ", codes_in.scalar_type(), " ", codes_in.sizes());
    const c10::cuda::CUDAGuard guard(codes_in.device());
    const at::Tensor codes = codes_in.contiguous();
    const int64_t rows = codes.size(0), cols = codes.size(1);
    at::Tensor out = at::empty({cols, rows}, codes.options());
    FP8T_KERNEL_CHECK(fp8t_transpose_codes(codes.data_ptr<uint8_t>(), rows, cols, out.data_ptr<uint8_t>(),
                                           stream_of(codes)),
                      "transpose of FP8 codes ", rows, "x", cols);
    return out;
  }

  at::Tensor gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype,
                  GemmKind kind, bool fast_accum) override {
    FP8T_CHECK(a.defined() && b.defined(), "fp8 gemm ", to_string(kind), ": missing FP8 operand (A ",
               a.defined() ? "set" : "missing", ", B ", b.defined() ? "set" : "missing", ")");
    if (is_row_scaled(a) || is_row_scaled(b)) return rowwise_gemm(a, b, bias, out_dtype, kind, fast_accum);
    if (is_block_scaled(a) || is_block_scaled(b)) return block_gemm(a, b, bias, out_dtype, kind);
    return gemm::fp8_gemm(a.codes, a.format, a.scale_inv, b.codes, b.format, b.scale_inv, bias, out_dtype,
                          fast_accum, to_string(kind));
  }

  NormForwardResult norm_forward(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, double eps,
                                 bool rms, const SlotRef* slot, bool write_y, const at::Tensor& y_amax) override {
    return cuda_norm_forward(x, gamma, beta, eps, rms, slot, write_y, y_amax);
  }

  NormForwardResult add_norm_forward(const at::Tensor& x, const at::Tensor& h, const at::Tensor& gamma,
                                     const at::Tensor& beta, double eps, bool rms, const SlotRef* slot, bool write_y,
                                     const at::Tensor& y_amax) override {
    return cuda_add_norm_forward(x, h, gamma, beta, eps, rms, slot, write_y, y_amax);
  }

  NormBackwardResult norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& gamma,
                                   const at::Tensor& beta, const at::Tensor& mean, const at::Tensor& rstd,
                                   bool rms) override {
    return cuda_norm_backward(dy, x, gamma, beta, mean, rstd, rms);
  }

  NormBackwardResult add_norm_backward(const at::Tensor& dy, const at::Tensor& dr, const at::Tensor& r,
                                       const at::Tensor& gamma, const at::Tensor& beta, const at::Tensor& mean,
                                       const at::Tensor& rstd, bool rms, at::ScalarType h_dtype) override {
    return cuda_add_norm_backward(dy, dr, r, gamma, beta, mean, rstd, rms, h_dtype);
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
  // producer's amax, the scale kernel that also records it. The SwiGLU passes also write their
  // value (returned) unless may_write_value is false: the cast then reads it at memory bandwidth,
  // where the fused SwiGLU casts would evaluate the activation a second time.
  at::Tensor current_amax_scale(const CastSource& src, const at::Tensor& known_amax, const at::Tensor& amax,
                                const at::Tensor& scale, const at::Tensor& scale_inv, const at::Tensor& workspace,
                                float fp8_max, float two_pow_margin, bool may_write_value) override {
    FP8T_CHECK(src.x.is_cuda(), "fp8 amax pass expects a CUDA tensor, got one on ", src.x.device().str());
    const c10::cuda::CUDAGuard guard(src.x.device());
    float* a = device_scalar(amax, src.x, "amax", SlotRef{});
    float* s = device_scalar(scale, src.x, "scale", SlotRef{});
    float* si = device_scalar(scale_inv, src.x, "scale_inv", SlotRef{});
    if (known_amax.defined()) {
      FP8T_KERNEL_CHECK(fp8t_current_scale(device_scalar(known_amax, src.x, "known amax", SlotRef{}), fp8_max,
                                           two_pow_margin, s, si, a, stream_of(src.x)),
                        "current scale from a producer's amax on ", src.x.device().str());
      return at::Tensor();
    }
    const AmaxInputs in = amax_inputs(src);
    if (!in.x.defined()) {
      return Backend::current_amax_scale(src, known_amax, amax, scale, scale_inv, workspace, fp8_max, two_pow_margin);
    }
    FP8T_CHECK(workspace.defined() && workspace.numel() == 2 && workspace.scalar_type() == at::kInt &&
                   workspace.device() == src.x.device() && workspace.is_contiguous(),
               "fp8 amax pass: the workspace must be a contiguous int32 [2] on ", src.x.device().str());
    unsigned int* ws = reinterpret_cast<unsigned int*>(workspace.data_ptr<int32_t>());
    // Without may_write_value a SwiGLU takes the plain pass below, which skips the points whose
    // bound cannot raise the max (lib/numerics/swiglu_math.h) and so runs at the speed of its loads.
    if ((in.act == FP8T_ACT_SWIGLU || in.act == FP8T_ACT_DSWIGLU) && may_write_value) {
      const bool backward = in.act == FP8T_ACT_DSWIGLU;
      const at::Tensor& h = backward ? in.h : in.x;
      at::Tensor value = at::empty({in.rows, backward ? 2 * in.cols : in.cols}, h.options());
      FP8T_KERNEL_CHECK(fp8t_swiglu_amax_scale_value(backward ? 1 : 0, backward ? in.x.data_ptr() : nullptr,
                                                     h.data_ptr(), dtype_code(h), in.rows, in.cols, value.data_ptr(),
                                                     a, ws, fp8_max, two_pow_margin, s, si, stream_of(h)),
                        "fp8 swiglu amax pass", backward ? " (backward)" : "", " of ", h.scalar_type(), " ",
                        h.sizes());
      return value;
    }
    FP8T_KERNEL_CHECK(fp8t_amax_scale(in.act, in.x.data_ptr(), in.h.defined() ? in.h.data_ptr() : nullptr,
                                      dtype_code(in.x), in.rows, in.cols, a, ws, fp8_max, two_pow_margin, s, si,
                                      stream_of(in.x)),
                      "fp8 amax pass (operation ", in.act, ") of ", in.x.scalar_type(), " ", in.x.sizes());
    return at::Tensor();
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

  // The SwiGLU gradient cast with the value companion: one kernel for bf16 h without dbias and an
  // E4M3 value, else the gradient cast and then the value's (quantize_unfused).
  Fp8Tensor dswiglu_quantize_grad_with_value(const CastSource& src, const SlotRef& slot, const QuantizeOptions& opt) {
    FP8T_CHECK(src.op == CastOp::kDswiglu, "fp8 cast: only a SwiGLU gradient cast writes the value's codes too");
    if (src.h.scalar_type() != at::kBFloat16 || opt.dbias != nullptr || opt.value.slot.format != Format::kE4M3) {
      return quantize_unfused(src, slot, opt);
    }
    return swiglu_cast(src.x, src.h, &slot, true, true, nullptr, at::Tensor(), &opt.value);
  }

  // One launch of kernels/swiglu_cast.cu: the forward of h [rows, 2F] when dy is undefined, else
  // the backward of dy [rows, F] at h, cast with the slot's scale. Without a slot: the amax pass of
  // current scaling into amax_only (no codes, no scale). value (backward, bf16, no dbias): also the
  // value's columnwise E4M3 codes (fp8t_dswiglu_cast_transpose_value).
  static Fp8Tensor swiglu_cast(const at::Tensor& dy_in, const at::Tensor& h_in, const SlotRef* slot, bool rowwise,
                               bool columnwise, at::Tensor* dbias, const at::Tensor& amax_only,
                               const ValueCompanion* value = nullptr) {
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
    if (value != nullptr) {
      const at::Tensor value_codes = at::empty({f, rows}, bytes_on(h));
      const float* value_scale = device_scalar(value->slot.scale, h, "value scale", value->slot);
      FP8T_KERNEL_CHECK(fp8t_dswiglu_cast_transpose_value(dy.data_ptr(), h.data_ptr(), dtype_code(h), rows, f, scale,
                                                          format_code(s.format), row, col, amax, sinv, value_scale,
                                                          value_codes.data_ptr<uint8_t>(), stream_of(h)),
                        what, " with the value's codes of ", h.scalar_type(), " ", h.sizes(), " (slot ", s.index, ")");
      // A snapshot of the value's scale_inv, as every cast stores one with its codes.
      *value->columnwise = make_operand(value_codes, at::reciprocal(value->slot.scale.reshape({})), value->slot.format);
    } else {
      FP8T_KERNEL_CHECK(
          backward ? fp8t_dswiglu_cast_transpose(dy.data_ptr(), h.data_ptr(), dtype_code(h), rows, f, scale,
                                                 format_code(s.format), row, col, amax, sinv,
                                                 dbias != nullptr ? dbias->data_ptr<float>() : nullptr,
                                                 dbias != nullptr ? ws.data_ptr() : nullptr, stream_of(h))
                   : fp8t_swiglu_cast_transpose(h.data_ptr(), dtype_code(h), rows, f, scale, format_code(s.format),
                                                row, col, amax, sinv, stream_of(h)),
          what, dbias != nullptr ? "+dbias" : "", " of ", h.scalar_type(), " ", h.sizes(), " (slot ", s.index, ")");
    }
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
