#include "lib/fp8/backends/grouped_gemm.h"

#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace fp8 {
namespace {

// The operand's dequantization factors as one FP32 per row ([rows], contiguous): its row scales, or
// its per-tensor scale repeated (a device-side expand; nothing read on the host).
at::Tensor row_factors(const Fp8Operand& op, int64_t rows) {
  if (op.scale_layout == ScaleLayout::kRowwise) {
    FP8T_CHECK(op.scale_inv.numel() == rows, "fp8 grouped gemm: ", op.scale_inv.numel(), " row scales for ", rows,
               " rows");
    return op.scale_inv.to(at::kFloat).contiguous();
  }
  FP8T_CHECK(op.scale_layout == ScaleLayout::kTensor, "fp8 grouped gemm: per-tensor or per-row scales only");
  return op.scale_inv.to(at::kFloat).reshape({1}).expand({rows}).contiguous();
}

at::Tensor e4m3(const at::Tensor& codes) {
  return codes.view(at::kFloat8_e4m3fn);  // the same bytes as the dtype the kernel takes
}

void check_e4m3(const Fp8Operand& a, const Fp8Operand& b) {
  FP8T_CHECK(a.format == Format::kE4M3 && b.format == Format::kE4M3,
             "fp8 grouped gemm: operands must be E4M3 (at::_scaled_grouped_mm takes E4M3 only)");
  FP8T_CHECK(a.codes.is_contiguous() && b.codes.is_contiguous(), "fp8 grouped gemm: codes must be contiguous");
}

// b's dequantization factors as the kernel reads them, [G, Nout] with a unit last stride: per row of
// every stacked operand (rows), or b's per-row factors shared by every group (columns: a view that
// repeats them, stride 0 across the groups).
at::Tensor group_factors(const Fp8Operand& b, int64_t groups, int64_t n, GroupedOperands stacked) {
  if (stacked == GroupedOperands::kStackedRows) return row_factors(b, groups * n).view({groups, n});
  return b.scale_layout == ScaleLayout::kRowwise ? row_factors(b, n).unsqueeze(0).expand({groups, n})
                                                  : row_factors(b, n).repeat({groups}).view({groups, n});
}

}  // namespace

at::Tensor grouped_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                             at::ScalarType out_dtype, bool fast_accum, GroupedOperands stacked) {
  check_e4m3(a, b);
  const c10::cuda::CUDAGuard guard(a.codes.device());
  const int64_t groups = offsets.numel(), m = a.codes.size(0), k = a.codes.size(1);
  const bool rows = stacked == GroupedOperands::kStackedRows;
  const int64_t n = rows ? b.codes.size(0) / groups : b.codes.size(0);
  FP8T_CHECK(rows ? n * groups == b.codes.size(0) && b.codes.size(1) == k : b.codes.size(1) == groups * k,
             "fp8 grouped gemm: a ", a.codes.sizes(), " and b ", b.codes.sizes(), " for ", groups, " groups");
  // mat_b [G, K, N], column-major per group: the stacked row-major [G, N, K] codes transposed
  // (rows), or the columnwise copy [N, G*K] read in place (columns: group g starts at column g*K).
  const at::Tensor mat_b = rows ? e4m3(b.codes).view({groups, n, k}).transpose(1, 2)
                                : e4m3(b.codes).as_strided({groups, k, n}, {k, 1, groups * k});
  const at::Tensor out =
      at::_scaled_grouped_mm(e4m3(a.codes), mat_b, row_factors(a, m), group_factors(b, groups, n, stacked), offsets,
                             /*bias=*/std::nullopt, /*scale_result=*/std::nullopt, at::kBFloat16, fast_accum);
  return out.to(out_dtype);
}

at::Tensor grouped_gemm_wgrad_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& offsets,
                                   bool fast_accum) {
  check_e4m3(a, b);
  const c10::cuda::CUDAGuard guard(a.codes.device());
  const int64_t groups = offsets.numel(), n = a.codes.size(0), k = b.codes.size(0);
  FP8T_CHECK(a.codes.size(1) == b.codes.size(1), "fp8 grouped wgrad: a ", a.codes.sizes(), " and b ", b.codes.sizes(),
             " differ in the grouped (token) dim");
  // 2-D x 2-D with groups along the contraction: mat_a [N, M] row-major, mat_b [M, K] column-major
  // (b's [K, M] codes, transposed view); the scales one vector per group, group-major.
  const at::Tensor out = at::_scaled_grouped_mm(e4m3(a.codes), e4m3(b.codes).t(), row_factors(a, n).repeat({groups}),
                                                row_factors(b, k).repeat({groups}), offsets, std::nullopt,
                                                std::nullopt, at::kBFloat16, fast_accum);
  return out;  // [G, N, K]
}

}  // namespace fp8
}  // namespace fp8t
