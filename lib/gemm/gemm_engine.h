// The GEMM engine: the only code that builds cuBLASLt descriptors.
//
// out[M,N] = (a_scale_inv · A[M,K]) · (b_scale_inv · B[N,K])ᵀ (+ bias[N]) in FP8 (E4M3 x E4M3,
// E4M3 x E5M2, E5M2 x E4M3) or BF16 x BF16, with BF16 or FP32 output, FP32 accumulation
// (CUBLAS_COMPUTE_32F). Scale factors are device pointers (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER),
// so no call reads anything back to the host and the GEMM stays CUDA-graph friendly.
//
// Descriptors, layouts and the heuristic's algorithm are built once per (device, shape, types,
// layout, epilogue, fast-accum, alignment) and cached: a repeated GEMM costs one descriptor
// attribute update (the scale and bias pointers) and the cublasLtMatmul call. With autotuning on
// (train.gemm_autotune), a plan made outside CUDA-graph capture for a GEMM that overwrites its
// output times the heuristic's first kAutotuneCandidates algorithms on that call's operands and
// keeps the fastest by lib/gemm/gemm_autotune.h's rule (accumulating GEMMs and plans first made
// during capture keep the heuristic's first choice). Each device has one
// cuBLASLt handle and one 32 MiB workspace. Work runs on the current LibTorch CUDA stream; the
// shared workspace assumes GEMMs of one device are issued to one stream at a time (as the trainer
// does).
#pragma once

#include <ATen/ATen.h>     // at::Tensor
#include <cuda_runtime.h>  // cudaStream_t

#include <cstddef>  // size_t
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/numerics/format.h"     // fp8::Format
#include "lib/gemm/gemm_autotune.h"  // TuneRecord
#include "lib/gemm/gemm_problem.h"   // GemmProblem, DataType

namespace fp8t {
namespace gemm {

// Device pointers of one call. Bias type: BF16 when the output is BF16; FP32 for a BF16 GEMM with
// FP32 output (FP8 GEMMs with FP32 output take no bias: see validate()).
struct GemmOperands {
  const void* a = nullptr;
  const float* a_scale_inv = nullptr;  // FP8 only (null means 1)
  const void* b = nullptr;
  const float* b_scale_inv = nullptr;  // FP8 only (null means 1)
  const void* bias = nullptr;          // when problem.has_bias
  void* out = nullptr;
};

class GemmEngine {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what PyTorch and TE use on Hopper

  // The process-wide engine (never destroyed: its handles and workspaces outlive static
  // destructors that may run after the CUDA runtime has shut down).
  static GemmEngine& instance();

  // Validates the problem (throws fp8t::Error naming the shape), then runs it on `stream` on the
  // current CUDA device. Requires k > 0; m == 0 or n == 0 is a no-op.
  void run(const GemmProblem& problem, const GemmOperands& ops, cudaStream_t stream);

  size_t cached_plans() const;

  // Autotuning of the plans made from now on (made plans keep their algorithm). Off by default.
  void set_autotune(bool on);
  // One record per tuned plan, in the order they were made.
  std::vector<TuneRecord> tuning_log() const;

  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

 private:
  GemmEngine();
  ~GemmEngine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- tensor-level API (current LibTorch CUDA stream) ----------------------------------------

// FP8 GEMM of uint8 code tensors a [M,K] and b [N,K] (K contiguous), with 0-d float32 scale_inv
// tensors on the same device. bias: [N] any float dtype, or undefined. out_dtype: kBFloat16 or
// kFloat. label names the GEMM in errors ("fprop", "dgrad", "wgrad").
at::Tensor fp8_gemm(const at::Tensor& a_codes, fp8::Format a_format, const at::Tensor& a_scale_inv,
                    const at::Tensor& b_codes, fp8::Format b_format, const at::Tensor& b_scale_inv,
                    const at::Tensor& bias, at::ScalarType out_dtype, bool fast_accum,
                    const std::string& label);

// One block-scaled FP8 operand: uint8 codes [rows, K] (K contiguous) and its scale_inv grid in the
// layout cuBLASLt reads for `mode` (lib/numerics/block_math.h; 16-byte aligned):
//   kVec128 (1x128 blocks along K): sizes [rows, ceil(K/128)], strides (1, round_up4(rows));
//   kBlk128x128:                    sizes [ceil(rows/128), ceil(K/128)], strides (round_up4(ceil(K/128)), 1).
struct BlockScaledOperand {
  at::Tensor codes;
  at::Tensor scale_inv;
  fp8::Format format = fp8::Format::kE4M3;
  ScaleMode mode = ScaleMode::kVec128;
};

// Block-scaled FP8 GEMM out[M,N] = A[M,K] · B[N,K]ᵀ (+ bias[N]), every product of a block pair
// scaled by its two scale_invs; split accumulation always. Pairings 1x128 x 1x128, 1x128 x 128x128
// and 128x128 x 1x128 (validate() names the rules). The Linear's GEMMs under block scaling:
//   fprop  y  = x · Wᵀ:   A = x (1x128),          B = W (128x128)
//   dgrad  dx = dy · W:   A = dy (1x128),         B = Wᵀ (128x128, W's columnwise copy)
//   wgrad  dW = dyᵀ · x:  A = dyᵀ (1x128 along M), B = xᵀ (1x128 along M)
at::Tensor block_fp8_gemm(const BlockScaledOperand& a, const BlockScaledOperand& b, const at::Tensor& bias,
                          at::ScalarType out_dtype, const std::string& label);

// Row-scaled FP8 GEMM (cuBLASLt's OUTER_VEC_32F, the row-wise recipe): out[m,n] =
// a_scale_inv[m] · b_scale_inv[n] · Σ_k A[m,k]·B[n,k] (+ bias[N]) for code tensors a [M,K] and
// b [N,K] with float32 scale vectors [M] and [N] (contiguous, 16-byte aligned). The Linear's GEMMs
// under row-wise scaling: fprop A = x (per token), B = W (per output feature); dgrad A = dy (per
// token), B = Wᵀ (per input feature); wgrad A = dyᵀ, B = xᵀ (per feature, over the tokens).
at::Tensor rowwise_fp8_gemm(const at::Tensor& a_codes, fp8::Format a_format, const at::Tensor& a_scale_inv,
                            const at::Tensor& b_codes, fp8::Format b_format, const at::Tensor& b_scale_inv,
                            const at::Tensor& bias, at::ScalarType out_dtype, bool fast_accum,
                            const std::string& label);

// BF16 GEMM out = a · bᵀ for logical a [M,K] and b [N,K] in any float dtype (converted to BF16).
// Each operand may be row-major or a transposed view of a row-major tensor (then cuBLASLt reads
// it transposed, no copy). bias: [N] or undefined. out_dtype: kBFloat16 or kFloat.
at::Tensor bf16_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
                     at::ScalarType out_dtype, const std::string& label);
// out = a · bᵀ written into a given contiguous [M, N] float32 or bfloat16 tensor on a's device
// (bf16_gemm without the allocation: e.g. a chunk of a preallocated buffer).
void bf16_gemm_into(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& label);
// out += a · bᵀ in the same GEMM (cuBLASLt beta = 1): out is a contiguous [M, N] float32 or
// bfloat16 tensor on a's device; the sum is formed in FP32 and rounded once to out's dtype.
void bf16_gemm_accumulate(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& label);

}  // namespace gemm
}  // namespace fp8t
