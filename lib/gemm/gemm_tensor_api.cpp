// The tensor-level API of lib/gemm/gemm_engine.h (fp8_gemm, block_fp8_gemm, bf16_gemm,
// bf16_gemm_accumulate): checks LibTorch tensors, turns them into a GemmProblem and its operand
// pointers, and runs them through the engine on the current LibTorch CUDA stream.
#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream
#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAGuard

#include <cstdint>  // uintptr_t

#include "lib/numerics/block_math.h"  // ceil_div, kBlockLen, vec128/blk128 scale strides
#include "lib/gemm/gemm_engine.h"
#include "lib/util/error.h"           // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t {
namespace gemm {

namespace {

DataType out_type_of(at::ScalarType t, const std::string& what) {
  FP8T_INPUT_CHECK(t == at::kBFloat16 || t == at::kFloat, what, ": output dtype must be bfloat16 or float32, got ",
                   c10::toString(t));
  return t == at::kBFloat16 ? DataType::kBF16 : DataType::kF32;
}

at::Tensor as_codes(const at::Tensor& t, const char* name, const std::string& what) {
  FP8T_CHECK(t.defined() && t.dim() == 2, what, ": ", name, " must be a 2-D tensor of FP8 codes");
  FP8T_CHECK(t.is_cuda(), what, ": ", name, " is on ", t.device().str(), ", expected a CUDA tensor");
  at::Tensor c = t.scalar_type() == at::kByte ? t : t.view(at::kByte);
  FP8T_CHECK(c.element_size() == 1, what, ": ", name, " must hold 1-byte FP8 codes, got ", c10::toString(t.scalar_type()));
  return c.contiguous();
}

const float* scale_ptr(const at::Tensor& s, const at::Tensor& like, const char* name, const std::string& what) {
  FP8T_CHECK(s.defined() && s.numel() == 1 && s.scalar_type() == at::kFloat && s.device() == like.device(), what,
             ": ", name, " must be a 1-element float32 tensor on ", like.device().str());
  // cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED at the matmul for a scale 4 bytes into a buffer.
  FP8T_CHECK(reinterpret_cast<uintptr_t>(s.data_ptr<float>()) % 16 == 0, what, ": ", name,
             " is not 16-byte aligned (a view at an offset?); cuBLASLt reads scales from aligned pointers");
  return s.data_ptr<float>();
}

// A logical [rows, K] operand as cuBLASLt reads it: row-major, or the transpose of a row-major
// tensor (then `trans` is set and the returned tensor is that row-major [K, rows] storage).
at::Tensor storage_of(const at::Tensor& t, bool* trans) {
  if (t.is_contiguous()) {
    *trans = false;
    return t;
  }
  if (t.t().is_contiguous()) {
    *trans = true;
    return t.t();
  }
  *trans = false;
  return t.contiguous();
}

// out[M,N] of a product with nothing to multiply: untouched when M or N is 0, the bias (or zero) in
// every row when K is 0. Returns false when cuBLASLt has work to do.
bool empty_product(const GemmProblem& p, const at::Tensor& bias, at::Tensor& out) {
  if (p.m == 0 || p.n == 0) return true;
  if (p.k != 0) return false;
  out.zero_();
  if (bias.defined()) out.add_(bias.view({1, -1}));
  return true;
}

// The checked problem of an FP8 GEMM of code tensors a [M,K] and b [N,K].
GemmProblem fp8_problem(const at::Tensor& a, fp8::Format a_format, ScaleMode a_scale, const at::Tensor& b,
                        fp8::Format b_format, ScaleMode b_scale, const at::Tensor& bias, at::ScalarType out_dtype,
                        bool fast_accum, const std::string& label) {
  GemmProblem p;
  p.label = label;
  p.a_type = from_format(a_format);
  p.b_type = from_format(b_format);
  p.a_scale = a_scale;
  p.b_scale = b_scale;
  p.fast_accum = fast_accum;
  const std::string what0 = "fp8 gemm " + label;
  p.out_type = out_type_of(out_dtype, what0);
  FP8T_CHECK(a.device() == b.device(), what0, ": A on ", a.device().str(), ", B on ", b.device().str());
  p.m = a.size(0);
  p.k = a.size(1);
  p.n = b.size(0);
  FP8T_CHECK(b.size(1) == p.k, describe(p), ": A is ", a.sizes(), " but B is ", b.sizes(),
             " (both must be [rows, K] with the same K)");
  // The BIAS epilogue needs BF16 output; with FP32 output the bias is added afterwards.
  p.has_bias = bias.defined() && p.out_type == DataType::kBF16;
  validate(p);
  if (bias.defined()) {
    FP8T_CHECK(bias.numel() == p.n && bias.device() == a.device(), describe(p), ": bias must have N=", p.n,
               " elements on ", a.device().str(), ", got ", bias.sizes(), " on ", bias.device().str());
  }
  return p;
}

// Runs a checked FP8 problem; set_scales(ops) fills the scale pointers (only when there is work).
template <class SetScales>
at::Tensor run_fp8(const GemmProblem& p, const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
                   at::ScalarType out_dtype, SetScales&& set_scales) {
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty({p.m, p.n}, at::TensorOptions().dtype(out_dtype).device(a.device()));
  if (empty_product(p, bias, out)) return out;
  at::Tensor bias_t;
  GemmOperands ops;
  ops.a = a.data_ptr();
  ops.b = b.data_ptr();
  set_scales(ops);
  if (p.has_bias) {
    bias_t = bias.reshape({-1}).to(at::kBFloat16).contiguous();
    ops.bias = bias_t.data_ptr();
  }
  ops.out = out.data_ptr();
  GemmEngine::instance().run(p, ops, at::cuda::getCurrentCUDAStream(a.device().index()).stream());
  if (bias.defined() && !p.has_bias) out.add_(bias.to(at::kFloat).view({1, -1}));
  return out;
}

// The scale grid of a block-scaled operand [rows, K] in the layout cuBLASLt reads for `mode`
// (lib/numerics/block_math.h): its device pointer, after checking sizes, strides and alignment.
const float* block_scale_ptr(const BlockScaledOperand& op, const at::Tensor& codes, const char* name,
                             const std::string& what) {
  const int64_t rows = codes.size(0), k = codes.size(1);
  const bool vec = op.mode == ScaleMode::kVec128;
  const int64_t r = vec ? rows : fp8::ceil_div(rows, fp8::kBlockLen), c = fp8::ceil_div(k, fp8::kBlockLen);
  const int64_t s0 = vec ? 1 : fp8::blk128_scale_stride(k), s1 = vec ? fp8::vec128_scale_stride(rows) : 1;
  const at::Tensor& s = op.scale_inv;
  const bool ok = s.defined() && s.scalar_type() == at::kFloat && s.device() == codes.device() && s.dim() == 2 &&
                  s.size(0) == r && s.size(1) == c && (r <= 1 || s.stride(0) == s0) && (c <= 1 || s.stride(1) == s1);
  FP8T_CHECK(ok, what, ": ", name, " ", to_string(op.mode), " scale_inv must be [", r, ", ", c,
             "] float32 with strides (", s0, ", ", s1, ") on ", codes.device().str(), ", got ",
             s.defined() ? s.sizes() : at::IntArrayRef{}, " with strides ", s.defined() ? s.strides() : at::IntArrayRef{});
  FP8T_CHECK(reinterpret_cast<uintptr_t>(s.data_ptr()) % 16 == 0, what, ": ", name,
             " scale_inv is not 16-byte aligned (a view at an offset?)");
  return s.data_ptr<float>();
}

// The row vector of a row-scaled operand [rows, K]: float32 [rows], contiguous, 16-byte aligned.
const float* row_scale_ptr(const at::Tensor& s, const at::Tensor& codes, const char* name, const std::string& what) {
  const bool ok = s.defined() && s.scalar_type() == at::kFloat && s.device() == codes.device() && s.dim() == 1 &&
                  s.size(0) == codes.size(0) && s.is_contiguous();
  FP8T_CHECK(ok, what, ": ", name, " row-wise scale_inv must be [", codes.size(0), "] contiguous float32 on ",
             codes.device().str(), ", got ", s.defined() ? s.sizes() : at::IntArrayRef{});
  FP8T_CHECK(reinterpret_cast<uintptr_t>(s.data_ptr()) % 16 == 0, what, ": ", name,
             " scale_inv is not 16-byte aligned (a view at an offset?)");
  return s.data_ptr<float>();
}

}  // namespace

at::Tensor fp8_gemm(const at::Tensor& a_codes, fp8::Format a_format, const at::Tensor& a_scale_inv,
                    const at::Tensor& b_codes, fp8::Format b_format, const at::Tensor& b_scale_inv,
                    const at::Tensor& bias, at::ScalarType out_dtype, bool fast_accum, const std::string& label) {
  const std::string what0 = "fp8 gemm " + label;
  const at::Tensor a = as_codes(a_codes, "A", what0);
  const at::Tensor b = as_codes(b_codes, "B", what0);
  const GemmProblem p = fp8_problem(a, a_format, ScaleMode::kScalar, b, b_format, ScaleMode::kScalar, bias,
                                    out_dtype, fast_accum, label);
  return run_fp8(p, a, b, bias, out_dtype, [&](GemmOperands& ops) {
    ops.a_scale_inv = scale_ptr(a_scale_inv, a, "A scale_inv", describe(p));
    ops.b_scale_inv = scale_ptr(b_scale_inv, a, "B scale_inv", describe(p));
  });
}

at::Tensor block_fp8_gemm(const BlockScaledOperand& a_op, const BlockScaledOperand& b_op, const at::Tensor& bias,
                          at::ScalarType out_dtype, const std::string& label) {
  const std::string what0 = "fp8 gemm " + label;
  FP8T_CHECK(a_op.mode != ScaleMode::kScalar && b_op.mode != ScaleMode::kScalar, what0,
             ": block_fp8_gemm takes block-scaled operands (1x128 or 128x128)");
  const at::Tensor a = as_codes(a_op.codes, "A", what0);
  const at::Tensor b = as_codes(b_op.codes, "B", what0);
  const GemmProblem p = fp8_problem(a, a_op.format, a_op.mode, b, b_op.format, b_op.mode, bias, out_dtype,
                                    /*fast_accum=*/false, label);
  return run_fp8(p, a, b, bias, out_dtype, [&](GemmOperands& ops) {
    ops.a_scale_inv = block_scale_ptr(a_op, a, "A", describe(p));
    ops.b_scale_inv = block_scale_ptr(b_op, b, "B", describe(p));
  });
}

at::Tensor rowwise_fp8_gemm(const at::Tensor& a_codes, fp8::Format a_format, const at::Tensor& a_scale_inv,
                            const at::Tensor& b_codes, fp8::Format b_format, const at::Tensor& b_scale_inv,
                            const at::Tensor& bias, at::ScalarType out_dtype, bool fast_accum,
                            const std::string& label) {
  const std::string what0 = "fp8 gemm " + label;
  const at::Tensor a = as_codes(a_codes, "A", what0);
  const at::Tensor b = as_codes(b_codes, "B", what0);
  const GemmProblem p = fp8_problem(a, a_format, ScaleMode::kRowVector, b, b_format, ScaleMode::kRowVector, bias,
                                    out_dtype, fast_accum, label);
  return run_fp8(p, a, b, bias, out_dtype, [&](GemmOperands& ops) {
    ops.a_scale_inv = row_scale_ptr(a_scale_inv, a, "A", describe(p));
    ops.b_scale_inv = row_scale_ptr(b_scale_inv, b, "B", describe(p));
  });
}

namespace {

// bf16_gemm and bf16_gemm_accumulate: out [M, N] (given, contiguous) = a · bᵀ (+ bias) or
// out += a · bᵀ.
void run_bf16(const at::Tensor& a_in, const at::Tensor& b_in, const at::Tensor& bias, at::Tensor& out,
              bool accumulate, const std::string& label) {
  GemmProblem p;
  p.label = label;
  p.a_type = p.b_type = DataType::kBF16;
  const std::string what0 = "bf16 gemm " + label;
  p.out_type = out_type_of(out.scalar_type(), what0);
  FP8T_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.is_cuda() && a_in.device() == b_in.device(), what0,
             ": operands must be 2-D CUDA tensors on one device, got ", a_in.sizes(), " and ", b_in.sizes());
  p.m = a_in.size(0);
  p.k = a_in.size(1);
  p.n = b_in.size(0);
  p.accumulate = accumulate;
  FP8T_CHECK(b_in.size(1) == p.k, describe(p), ": A is ", a_in.sizes(), " but B is ", b_in.sizes(),
             " (out = A · Bᵀ needs the same K)");
  FP8T_CHECK(out.dim() == 2 && out.size(0) == p.m && out.size(1) == p.n && out.is_contiguous() &&
                 out.device() == a_in.device(),
             describe(p), ": the output must be a contiguous [", p.m, ", ", p.n, "] tensor on ", a_in.device().str(),
             ", got ", out.sizes());
  p.has_bias = bias.defined();
  validate(p);

  const c10::cuda::CUDAGuard guard(a_in.device());
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {  // an empty sum: out keeps its values (accumulate) or becomes the bias / zeros
    if (accumulate) return;
    empty_product(p, bias, out);
    return;
  }
  const at::Tensor a = storage_of(a_in.to(at::kBFloat16), &p.trans_a);
  const at::Tensor b = storage_of(b_in.to(at::kBFloat16), &p.trans_b);
  at::Tensor bias_t;
  GemmOperands ops;
  ops.a = a.data_ptr();
  ops.b = b.data_ptr();
  if (p.has_bias) {
    FP8T_CHECK(bias.numel() == p.n, describe(p), ": bias must have N=", p.n, " elements, got ", bias.sizes());
    bias_t = bias.reshape({-1}).to(out.scalar_type()).contiguous();
    ops.bias = bias_t.data_ptr();
  }
  ops.out = out.data_ptr();
  GemmEngine::instance().run(p, ops, at::cuda::getCurrentCUDAStream(a_in.device().index()).stream());
}

}  // namespace

at::Tensor bf16_gemm(const at::Tensor& a_in, const at::Tensor& b_in, const at::Tensor& bias,
                     at::ScalarType out_dtype, const std::string& label) {
  out_type_of(out_dtype, "bf16 gemm " + label);
  FP8T_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.is_cuda(), "bf16 gemm ", label,
             ": operands must be 2-D CUDA tensors, got ", a_in.sizes(), " and ", b_in.sizes());
  at::Tensor out = at::empty({a_in.size(0), b_in.size(0)}, at::TensorOptions().dtype(out_dtype).device(a_in.device()));
  run_bf16(a_in, b_in, bias, out, /*accumulate=*/false, label);
  return out;
}

void bf16_gemm_into(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& label) {
  run_bf16(a, b, at::Tensor(), out, /*accumulate=*/false, label);
}

void bf16_gemm_accumulate(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& label) {
  run_bf16(a, b, at::Tensor(), out, /*accumulate=*/true, label);
}

}  // namespace gemm
}  // namespace fp8t
