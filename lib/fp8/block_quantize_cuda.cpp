// The GPU block casts (block_quantize.h): a LibTorch wrapper over kernels/block_quantize.cu.
// Only enqueues work on the current stream of x's device (no host synchronisation).
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include "fp8t_block_kernels.h"      // fp8t_block_quantize_1x128 / _128x128
#include "lib/fp8/block_math.h"      // kBlockLen
#include "lib/fp8/block_quantize.h"  // BlockQuantized, make_block_scales
#include "lib/util/cuda_tensors.h"   // stream_of, bytes_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"          // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

// Codes and a scale grid to be written by the kernel (it writes every entry of the grid's buffer,
// padding included).
BlockCodes allocate(int64_t rows, int64_t k, int block_rows, const at::Tensor& like) {
  BlockCodes out;
  out.codes = at::empty({rows, k}, cuda::bytes_on(like));
  out.scale_inv = make_block_scales(rows, k, block_rows, like.device(), /*zero_fill=*/false);
  return out;
}

uint8_t* codes_ptr(const BlockCodes& c) { return c.defined() ? c.codes.data_ptr<uint8_t>() : nullptr; }
float* scales_ptr(const BlockCodes& c) { return c.defined() ? c.scale_inv.data_ptr<float>() : nullptr; }

}  // namespace

BlockQuantized block_quantize_cuda(const at::Tensor& x_in, int block_rows, bool rowwise, bool columnwise,
                                   bool power_of_2) {
  FP8T_CHECK(x_in.dim() == 2 && x_in.is_cuda(), "block quantize expects a 2-D CUDA tensor, got ", x_in.sizes(),
             " on ", x_in.device().str());
  FP8T_CHECK(block_rows == 1 || block_rows == kBlockLen, "block quantize: block_rows must be 1 or 128, got ",
             block_rows);
  const c10::cuda::CUDAGuard guard(x_in.device());
  // The kernels read fp32 or bf16; fp16/fp64 are cast as fp32 (block_quantize.h says why that is exact).
  const at::ScalarType t = x_in.scalar_type();
  const at::Tensor x = (t == at::kFloat || t == at::kBFloat16 ? x_in : x_in.to(at::kFloat)).contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  BlockQuantized q;
  if (rowwise) q.rowwise = allocate(rows, cols, block_rows, x);
  if (columnwise) q.columnwise = allocate(cols, rows, block_rows, x);
  const auto launch = block_rows == 1 ? fp8t_block_quantize_1x128 : fp8t_block_quantize_128x128;
  FP8T_KERNEL_CHECK(launch(x.data_ptr(), cuda::dtype_code(x), rows, cols, power_of_2 ? 1 : 0, codes_ptr(q.rowwise),
                           scales_ptr(q.rowwise), codes_ptr(q.columnwise), scales_ptr(q.columnwise),
                           cuda::stream_of(x)),
                    "fp8 block cast (", block_rows == 1 ? "1x128" : "128x128", ") of ", x.scalar_type(), " ",
                    x.sizes());
  return q;
}

}  // namespace fp8
}  // namespace fp8t
