// The CUDA parts of ops::linear_cross_entropy: one chunk's cross-entropy through
// kernels/cross_entropy.cu (forward and gradient in place over the chunk's logits), the chunk's
// BF16 GEMMs and the FP32 accumulation of the head's weight gradient, all three through lib/gemm.
//
// Everything is enqueued on the current LibTorch CUDA stream; nothing is read back to the host.
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include "fp8t_kernels.h"                // fp8t_cross_entropy_forward / _backward, fp8t_scale_unless_one
#include "lib/gemm/gemm_engine.h"        // gemm::bf16_gemm, bf16_gemm_into, bf16_gemm_accumulate
#include "lib/ops/linear_cross_entropy.h"
#include "lib/util/cuda_tensors.h"       // stream_of, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"              // FP8T_CHECK

namespace fp8t {
namespace ops {
namespace detail {

void cross_entropy_chunk_cuda(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& loss_rows,
                              const at::Tensor& lse, const at::Tensor& grad_scale) {
  FP8T_CHECK(logits.dim() == 2 && logits.is_contiguous() &&
                 (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16),
             "linear_cross_entropy: chunk logits must be contiguous 2-D float32 or bfloat16, got ",
             logits.scalar_type(), " ", logits.sizes());
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const cudaStream_t stream = cuda::stream_of(logits);
  FP8T_KERNEL_CHECK(fp8t_cross_entropy_forward(logits.data_ptr(), cuda::dtype_code(logits),
                                               targets.data_ptr<int64_t>(), rows, vocab, loss_rows.data_ptr<float>(),
                                               lse.data_ptr<float>(), stream),
                    "linear_cross_entropy chunk forward, logits ", rows, "x", vocab, " ", logits.scalar_type());
  if (!grad_scale.defined()) return;
  // In place: the kernel reads each element before it writes it, in the same thread.
  FP8T_KERNEL_CHECK(fp8t_cross_entropy_backward(logits.data_ptr(), cuda::dtype_code(logits),
                                                targets.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                                grad_scale.data_ptr<float>(), rows, vocab, logits.data_ptr(), stream),
                    "linear_cross_entropy chunk gradient, logits ", rows, "x", vocab, " ", logits.scalar_type());
}

void head_gemm_cuda(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const char* label) {
  gemm::bf16_gemm_into(a, b, out, label);
}

void accumulate_weight_grad_cuda(at::Tensor& dw, const at::Tensor& g, const at::Tensor& x) {
  if (g.scalar_type() != at::kBFloat16) {  // FP32: cuBLAS accumulates into dw (beta = 1)
    dw = dw.defined() ? dw.addmm_(g.t(), x) : at::mm(g.t(), x);
    return;
  }
  // BF16 operands, FP32 products and sums: lib/gemm's BF16 GEMM, the first chunk writing dw, the
  // others adding to it in the GEMM's epilogue (beta = 1; the transposed views are read in place).
  if (!dw.defined()) {
    dw = gemm::bf16_gemm(g.t(), x.t(), at::Tensor(), at::kFloat, "head wgrad");
    return;
  }
  gemm::bf16_gemm_accumulate(g.t(), x.t(), dw, "head wgrad");
}

void scale_unless_one_cuda(at::Tensor& t, const at::Tensor& g) {
  const c10::cuda::CUDAGuard guard(t.device());
  FP8T_KERNEL_CHECK(fp8t_scale_unless_one(t.data_ptr(), cuda::dtype_code(t), t.numel(), g.data_ptr<float>(),
                                          cuda::stream_of(t)),
                    "linear_cross_entropy backward: ", t.scalar_type(), " ", t.sizes(), " times the incoming gradient");
}

}  // namespace detail
}  // namespace ops
}  // namespace fp8t
