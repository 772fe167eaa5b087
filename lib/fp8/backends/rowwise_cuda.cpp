// The row-wise recipe on CUDA (rowwise_quantize.h): the casts through kernels/rowwise_quantize.cu,
// the GEMM through lib/gemm's OUTER_VEC_32F cuBLASLt GEMM. Only enqueues work on the current
// stream of the input's device (no host synchronisation).
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include "fp8t_rowwise_kernels.h"               // fp8t_rowwise_quantize, fp8t_columnwise_quantize
#include "lib/fp8/backends/rowwise_quantize.h"  // the declarations
#include "lib/gemm/gemm_engine.h"               // gemm::rowwise_fp8_gemm
#include "lib/util/cuda_tensors.h"              // stream_of, bytes_on, floats_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"                     // FP8T_CHECK

namespace fp8t {
namespace fp8 {

Fp8Tensor rowwise_quantize_cuda(const at::Tensor& x_in, bool rowwise, bool columnwise) {
  FP8T_CHECK(x_in.dim() == 2 && x_in.is_cuda(), "row-wise quantize expects a 2-D CUDA tensor, got ", x_in.sizes());
  const c10::cuda::CUDAGuard guard(x_in.device());
  // fp16/fp64 as fp32: the same codes and scales (the conversion of fp16 is exact).
  const bool kernel_dtype = x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16;
  const at::Tensor x = (kernel_dtype ? x_in : x_in.to(at::kFloat)).contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  Fp8Tensor out;
  if (rowwise) {
    at::Tensor codes = at::empty({rows, cols}, cuda::bytes_on(x));
    at::Tensor sinv = at::empty({rows}, cuda::floats_on(x));
    FP8T_KERNEL_CHECK(fp8t_rowwise_quantize(x.data_ptr(), cuda::dtype_code(x), rows, cols,
                                            codes.data_ptr<uint8_t>(), sinv.data_ptr<float>(), cuda::stream_of(x)),
                      "row-wise quantize ", rows, "x", cols);
    out.rowwise = rowwise_operand(codes, sinv);
  }
  if (columnwise) {
    at::Tensor codes = at::empty({cols, rows}, cuda::bytes_on(x));
    at::Tensor sinv = at::empty({cols}, cuda::floats_on(x));
    at::Tensor amax = at::zeros({cols}, x.options().dtype(at::kInt));
    FP8T_KERNEL_CHECK(fp8t_columnwise_quantize(x.data_ptr(), cuda::dtype_code(x), rows, cols,
                                               codes.data_ptr<uint8_t>(), sinv.data_ptr<float>(),
                                               amax.data_ptr<int>(), cuda::stream_of(x)),
                      "column-wise quantize ", rows, "x", cols);
    out.columnwise = rowwise_operand(codes, sinv);
  }
  return out;
}

at::Tensor rowwise_gemm_cuda(const Fp8Operand& a, const Fp8Operand& b, const at::Tensor& bias,
                             at::ScalarType out_dtype, GemmKind kind, bool fast_accum) {
  return gemm::rowwise_fp8_gemm(a.codes, a.format, a.scale_inv, b.codes, b.format, b.scale_inv, bias, out_dtype,
                                fast_accum, to_string(kind));
}

}  // namespace fp8
}  // namespace fp8t
