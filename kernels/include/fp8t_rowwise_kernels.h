// fp8train CUDA kernels of row-wise scaling (kernels/rowwise_quantize.cu): the C API, in the
// conventions of fp8t_kernels.h (launch on `stream`, checked preconditions named by
// fp8t_last_precondition(), device pointers, FP8 data as uint8 codes).
//
// Row-wise scaling is E4M3 only: one FP32 scale per row of a GEMM operand, from that row's amax
// (lib/numerics/rowwise_math.h, row_scale_from_amax); the kernels write each row's scale_inv
// (the dequantisation factor cuBLASLt's OUTER_VEC_32F mode reads) as one float per row.
#pragma once

#include "fp8t_kernels.h"  // cudaStream_t, cudaError_t, FP8T_DTYPE_*

#ifdef __cplusplus
extern "C" {
#endif

// codes [rows, cols] of x[rows, cols] (row-major, fp32 or bf16), each row with its own scale;
// scale_inv [rows].
cudaError_t fp8t_rowwise_quantize(const void* x, int x_dtype, int64_t rows, int64_t cols, uint8_t* codes,
                                  float* scale_inv, cudaStream_t stream);

// The columnwise copy: codes [cols, rows] = the transposed tensor, each of its rows (a column of
// x) with its own scale from that column's amax over all rows of x; scale_inv [cols].
// column_amax: int32 [cols] device workspace, zero on entry (the kernel leaves the amaxes' bits).
cudaError_t fp8t_columnwise_quantize(const void* x, int x_dtype, int64_t rows, int64_t cols, uint8_t* codes,
                                     float* scale_inv, int* column_amax, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
