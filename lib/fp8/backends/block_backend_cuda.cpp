// The block recipe on CUDA: the fused 1x128 casts of cast sources, and Fp8Operands with block
// scale layouts to lib/gemm's block-scaled cuBLASLt GEMM (split accumulation).
#include "lib/fp8/backends/block_backend.h"

#include "lib/fp8/backends/block_quantize.h"  // block_quantize_act_cuda, BlockAct
#include "lib/gemm/gemm_engine.h"             // gemm::block_fp8_gemm, BlockScaledOperand, ScaleMode

namespace fp8t {
namespace fp8 {

namespace {

gemm::BlockScaledOperand as_gemm_operand(const Fp8Operand& op) {
  return gemm::BlockScaledOperand{
      op.codes, op.scale_inv, op.format,
      op.scale_layout == ScaleLayout::kBlock128x128 ? gemm::ScaleMode::kBlk128x128 : gemm::ScaleMode::kVec128};
}

}  // namespace

// The fused 1x128 casts (kernels/block_quantize.cu): x, gelu(h) and the GELU backward in fp32 or
// bf16. dy is read in h's dtype, as at::gelu_backward computes (materialize).
std::optional<Fp8Tensor> block_quantize_source_cuda(const CastSource& src, int block_rows, bool rowwise,
                                                    bool columnwise, bool power_of_2, at::Tensor* dbias) {
  if (block_rows != 1) return std::nullopt;
  const auto kernel_dtype = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
  };
  switch (src.op) {
    case CastOp::kIdentity: {
      // fp16/fp64 are cast as fp32: the same codes, scales and sums (block_quantize.h).
      const at::Tensor x = kernel_dtype(src.x) ? src.x : src.x.to(at::kFloat);
      return block_operands(
          block_quantize_act_cuda(BlockAct::kNone, x, at::Tensor(), rowwise, columnwise, power_of_2, dbias), 1);
    }
    case CastOp::kGelu:
      if (!kernel_dtype(src.x)) return std::nullopt;  // gelu rounds to fp16/fp64: not the kernels' rounding
      return block_operands(
          block_quantize_act_cuda(BlockAct::kGelu, src.x, at::Tensor(), rowwise, columnwise, power_of_2, dbias), 1);
    case CastOp::kDgelu:
      if (!kernel_dtype(src.h)) return std::nullopt;
      return block_operands(block_quantize_act_cuda(BlockAct::kDgelu, src.x.to(src.h.scalar_type()), src.h, rowwise,
                                                    columnwise, power_of_2, dbias),
                            1);
    default: return std::nullopt;  // SwiGLU: materialized, then cast
  }
}

at::Tensor block_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                           at::ScalarType out_dtype, GemmKind kind) {
  return gemm::block_fp8_gemm(as_gemm_operand(a), as_gemm_operand(b), bias, out_dtype, to_string(kind));
}

}  // namespace fp8
}  // namespace fp8t
