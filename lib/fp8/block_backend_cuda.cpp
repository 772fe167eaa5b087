// The block recipe's GEMM on CUDA: Fp8Operands with block scale layouts to lib/gemm's
// block-scaled cuBLASLt GEMM (split accumulation).
#include "lib/fp8/block_backend.h"

#include "lib/gemm/gemm_engine.h"  // gemm::block_fp8_gemm, BlockScaledOperand, ScaleMode

namespace fp8t {
namespace fp8 {

namespace {

gemm::BlockScaledOperand as_gemm_operand(const Fp8Operand& op) {
  return gemm::BlockScaledOperand{
      op.codes, op.scale_inv, op.format,
      op.scale_layout == ScaleLayout::kBlock128x128 ? gemm::ScaleMode::kBlk128x128 : gemm::ScaleMode::kVec128};
}

}  // namespace

at::Tensor block_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                           at::ScalarType out_dtype, GemmKind kind) {
  return gemm::block_fp8_gemm(as_gemm_operand(a), as_gemm_operand(b), bias, out_dtype, to_string(kind));
}

}  // namespace fp8
}  // namespace fp8t
