// The row-wise recipe on the CPU (rowwise_quantize.h): the emulation of the casts (the same amaxes,
// scales and codes as kernels/rowwise_quantize.cu, bit for bit), the GEMM on the dequantized
// operands, the device dispatch and the health statistics.
#include <ATen/Parallel.h>  // at::parallel_for

#include <algorithm>  // std::max
#include <cmath>      // std::fabs

#include "lib/fp8/backends/cpu_backend.h"       // decode_codes
#include "lib/fp8/backends/rowwise_quantize.h"  // the declarations
#include "lib/numerics/format.h"                // encode_e4m3, kE4M3Max
#include "lib/numerics/rowwise_math.h"          // row_scale_from_amax, block_scale_inv
#include "lib/numerics/scaling_math.h"          // amax_combine
#include "lib/util/error.h"                     // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

constexpr int64_t kGrainRows = 16;

// The float32 matrix a cast reads (fp16/fp64 as fp32, bf16 exactly widened) and whether its
// overflow value is bf16's (rowwise_math.h).
struct Source {
  at::Tensor x;  // contiguous float32 [rows, cols] on the CPU
  bool bf16;
};

Source source_of(const at::Tensor& x) {
  FP8T_CHECK(x.dim() == 2, "row-wise quantize expects a 2-D tensor, got ", x.sizes());
  return Source{x.to(at::kFloat).cpu().contiguous(), x.scalar_type() == at::kBFloat16};
}

// Codes [rows, cols] with one scale per row of the float32 matrix x (row-major).
Fp8Operand cast_rows(const float* x, int64_t rows, int64_t cols, bool bf16) {
  at::Tensor codes = at::empty({rows, cols}, at::kByte);
  at::Tensor sinv = at::empty({rows}, at::kFloat);
  uint8_t* c = codes.data_ptr<uint8_t>();
  float* s = sinv.data_ptr<float>();
  at::parallel_for(0, rows, kGrainRows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* row = x + r * cols;
      float amax = 0.0f;
      for (int64_t k = 0; k < cols; ++k) amax = amax_combine(amax, std::fabs(row[k]));
      const float scale = row_scale_from_amax(amax, bf16);
      for (int64_t k = 0; k < cols; ++k) c[r * cols + k] = encode_e4m3(row[k] * scale);
      s[r] = block_scale_inv(scale);
    }
  });
  return rowwise_operand(codes, sinv);
}

}  // namespace

Fp8Tensor rowwise_quantize_cpu(const at::Tensor& x, bool rowwise, bool columnwise) {
  const Source src = source_of(x);
  const int64_t rows = src.x.size(0), cols = src.x.size(1);
  Fp8Tensor out;
  if (rowwise) out.rowwise = cast_rows(src.x.data_ptr<float>(), rows, cols, src.bf16);
  if (columnwise) {
    // The transpose's rows are x's columns: the same casts on x^T (a copy; the values are exact).
    const at::Tensor t = src.x.t().contiguous();
    out.columnwise = cast_rows(t.data_ptr<float>(), cols, rows, src.bf16);
  }
  return out;
}

Fp8Tensor rowwise_quantize(const at::Tensor& x, bool rowwise, bool columnwise) {
#if defined(FP8T_WITH_CUDA)
  if (x.is_cuda()) return rowwise_quantize_cuda(x, rowwise, columnwise);
#endif
  return rowwise_quantize_cpu(x, rowwise, columnwise);
}

Fp8Tensor rowwise_quantize_source(const CastSource& src, bool rowwise, bool columnwise, at::Tensor* dbias) {
  const bool gradient = src.op == CastOp::kDgelu || src.op == CastOp::kDswiglu ||
                        (src.op == CastOp::kIdentity && dbias != nullptr);
  const at::Tensor x = materialize(src);
  if (dbias != nullptr) *dbias = x.to(at::kFloat).sum(0);
  return rowwise_quantize(x, rowwise || gradient, columnwise || gradient);
}

at::Tensor rowwise_dequantize(const Fp8Operand& op) {
  FP8T_CHECK(is_row_scaled(op) && op.codes.dim() == 2 && op.scale_inv.dim() == 1 &&
                 op.scale_inv.size(0) == op.codes.size(0),
             "row-wise dequantize: codes ", op.codes.sizes(), " with scale_inv ", op.scale_inv.sizes());
  const at::Tensor v = decode_codes(op.codes, op.format) * op.scale_inv.cpu().unsqueeze(1);
  return v.to(op.codes.device());
}

at::Tensor rowwise_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype,
                        GemmKind kind, bool fast_accum) {
  FP8T_CHECK(a.defined() && b.defined(), "fp8 gemm ", to_string(kind), ": missing FP8 operand");
  FP8T_CHECK(is_row_scaled(a) && is_row_scaled(b), "fp8 gemm ", to_string(kind),
             ": a row-scaled operand needs a row-scaled partner");
  FP8T_CHECK(a.codes.size(1) == b.codes.size(1), "fp8 gemm ", to_string(kind), ": K mismatch ", a.codes.sizes(),
             " vs ", b.codes.sizes());
#if defined(FP8T_WITH_CUDA)
  if (a.codes.is_cuda()) return rowwise_gemm_cuda(a, b, bias, out_dtype, kind, fast_accum);
#endif
  (void)fast_accum;  // the emulation's FP32 sum stands for either accumulator
  at::Tensor out = at::mm(rowwise_dequantize(a), rowwise_dequantize(b).t());
  if (bias.defined()) out.add_(bias.to(at::kFloat));
  return out.to(out_dtype);
}

at::Tensor rowwise_cast_stats(const at::Tensor& x, const Fp8Operand& q) {
  const int64_t rows = q.codes.size(0), k = q.codes.size(1);
  FP8T_CHECK(x.dim() == 2 && x.size(0) == rows && x.size(1) == k, "row-wise cast stats: x ", x.sizes(),
             " does not match the codes ", q.codes.sizes());
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor scale = at::reciprocal(q.scale_inv);  // exact: power-of-2 scales
  const at::Tensor scaled = xf * scale.unsqueeze(1);
  const double n = static_cast<double>(std::max<int64_t>(1, rows * k));
  const at::Tensor saturated = (scaled.abs() > kE4M3Max).sum().to(at::kFloat) / n;  // NaN compares false
  const at::Tensor flushed = ((xf != 0) & (q.codes.bitwise_and(0x7f) == 0)).sum().to(at::kFloat) / n;
  const at::Tensor abs = xf.abs();
  const at::Tensor amax = x.numel() == 0 ? at::zeros_like(saturated) : at::where(at::isnan(abs), 0.0f, abs).max();
  const at::Tensor one = at::ones_like(saturated);
  if (rows == 0) return at::stack({saturated, flushed, one, one, amax});
  return at::stack({saturated, flushed, scale.min(), scale.max(), amax});
}

}  // namespace fp8
}  // namespace fp8t
