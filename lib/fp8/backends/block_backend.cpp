#include "lib/fp8/backends/block_backend.h"

#include <utility>  // std::move

#include "lib/numerics/block_math.h"          // kBlockLen
#include "lib/fp8/backends/block_quantize.h"  // block_quantize, block_dequantize, BlockCodes
#include "lib/util/error.h"                   // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t {
namespace fp8 {

namespace {

Fp8Operand as_operand(BlockCodes c, int block_rows) {
  Fp8Operand op;
  op.codes = std::move(c.codes);
  op.scale_inv = std::move(c.scale_inv);
  op.format = Format::kE4M3;
  op.scale_layout = block_rows == 1 ? ScaleLayout::kBlock1x128 : ScaleLayout::kBlock128x128;
  return op;
}

int block_rows_of(const Fp8Operand& op) { return op.scale_layout == ScaleLayout::kBlock128x128 ? kBlockLen : 1; }

// The CPU emulation's GEMM: FP32 products of the dequantized operands (exact products of E4M3
// values times power-of-2 scales; the FP32 sum stands for the tensor cores' split accumulator).
at::Tensor block_gemm_cpu(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype) {
  const at::Tensor da = block_dequantize(BlockCodes{a.codes, a.scale_inv}, block_rows_of(a));
  const at::Tensor db = block_dequantize(BlockCodes{b.codes, b.scale_inv}, block_rows_of(b));
  at::Tensor out = at::mm(da, db.t());
  if (bias.defined()) out.add_(bias.to(at::kFloat));
  return out.to(out_dtype);
}

}  // namespace

Fp8Tensor block_operands(BlockQuantized q, int block_rows) {
  Fp8Tensor t;
  if (q.rowwise.defined()) t.rowwise = as_operand(std::move(q.rowwise), block_rows);
  if (q.columnwise.defined()) t.columnwise = as_operand(std::move(q.columnwise), block_rows);
  return t;
}

Fp8Tensor block_quantize_operands(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise,
                                  bool power_of_2) {
  return block_operands(block_quantize(x, block_rows, rowwise, columnwise, power_of_2), block_rows);
}

Fp8Tensor block_quantize_source(const CastSource& src, int block_rows, bool rowwise, bool columnwise,
                                bool power_of_2, at::Tensor* dbias) {
#if defined(FP8T_WITH_CUDA)
  if (src.x.is_cuda()) {
    std::optional<Fp8Tensor> fused = block_quantize_source_cuda(src, block_rows, rowwise, columnwise, power_of_2, dbias);
    if (fused) return std::move(*fused);
  }
#endif
  const at::Tensor x = materialize(src);
  if (dbias != nullptr) *dbias = x.to(at::kFloat).sum(0);
  return block_quantize_operands(x, block_rows, rowwise, columnwise, power_of_2);
}

at::Tensor block_gemm(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias, at::ScalarType out_dtype,
                      GemmKind kind) {
  FP8T_CHECK(a.defined() && b.defined(), "fp8 gemm ", to_string(kind), ": missing FP8 operand");
  FP8T_CHECK(is_block_scaled(a) && is_block_scaled(b), "fp8 gemm ", to_string(kind),
             ": a block-scaled operand needs a block-scaled partner");
  FP8T_CHECK(a.codes.size(1) == b.codes.size(1), "fp8 gemm ", to_string(kind), ": K mismatch ", a.codes.sizes(),
             " vs ", b.codes.sizes());
  FP8T_INPUT_CHECK(!(block_rows_of(a) == kBlockLen && block_rows_of(b) == kBlockLen), "fp8 gemm ", to_string(kind),
                   " ", a.codes.sizes(), " x ", b.codes.sizes(),
                   ": 128x128 x 128x128 block scaling is not supported by cuBLASLt");
#if defined(FP8T_WITH_CUDA)
  if (a.codes.is_cuda()) return block_gemm_cuda(a, b, bias, out_dtype, kind);
#endif
  return block_gemm_cpu(a, b, bias, out_dtype);
}

}  // namespace fp8
}  // namespace fp8t
