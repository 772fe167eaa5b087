// fp8train CUDA kernels of block scaling (kernels/block_quantize.cu): the C API, in the
// conventions of fp8t_kernels.h (launch on `stream`, checked preconditions named by
// fp8t_last_precondition(), device pointers, FP8 data as uint8 codes).
//
// Block scaling is E4M3 only. Every block's scale comes from lib/numerics/block_math.h
// (block_scale_from_amax; power_of_2 = fp8.block_power_of_2_scales); the kernels write the
// scale_inv (dequantisation factor) of every block in the layouts cuBLASLt's block scale modes read
// (block_math.h; docs/fp8.md "Block scaling"); padding entries of a scale array are written as 0.
#pragma once

#include "fp8t_kernels.h"  // cudaStream_t, cudaError_t, FP8T_DTYPE_*

#ifdef __cplusplus
extern "C" {
#endif

// 1x128 blocks from ONE read of x[rows, cols] (row-major, fp32 or bf16). Either layout may be
// skipped (null codes and scales):
//   rowwise:    codes [rows, cols], blocks of 128 along cols; scale_inv [ceil(cols/128), round_up4(rows)]
//               (rows contiguous: CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
//   columnwise: codes [cols, rows] (= the transposed tensor), blocks of 128 along rows, each block
//               with its own scale from the high-precision values (a 1x128-quantized tensor cannot be
//               transposed); scale_inv [ceil(rows/128), round_up4(cols)].
cudaError_t fp8t_block_quantize_1x128(const void* x, int x_dtype, int64_t rows, int64_t cols, int power_of_2,
                                      uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                      uint8_t* codes_columnwise, float* scale_inv_columnwise,
                                      cudaStream_t stream);

// 128x128 blocks (weights) of x[rows, cols]: rowwise codes [rows, cols] with scale_inv
// [ceil(rows/128), round_up4(ceil(cols/128))] (row-major, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
// columnwise codes [cols, rows] = the transposed codes, with the transposed scales
// [ceil(cols/128), round_up4(ceil(rows/128))] (a square block transposes). Either may be null.
cudaError_t fp8t_block_quantize_128x128(const void* x, int x_dtype, int64_t rows, int64_t cols, int power_of_2,
                                        uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                        uint8_t* codes_columnwise, float* scale_inv_columnwise,
                                        cudaStream_t stream);

// The 1x128 cast of an activation's value, evaluated in the kernel and never written in high
// precision (kernels/activation.cuh: the same GELU functions as the per-tensor fused casts):
//   act FP8T_ACT_NONE:  x itself;
//       FP8T_ACT_GELU:  gelu(x) (tanh approximation) rounded to `dtype`;
//       FP8T_ACT_DGELU: the GELU backward dy * gelu'(h) with dy = x, rounded to `dtype` (x and h
//                       both of `dtype`).
// Codes and scales as fp8t_block_quantize_1x128 of that value (either layout may be null). dbias
// (nullable) [cols] = column sums of the value in FP32 (per 128-row tile in row order, then the
// tiles in order: deterministic), with a workspace of fp8t_block_quantize_workspace_bytes(rows,
// cols), 16-byte aligned.
cudaError_t fp8t_block_quantize_act(int act, const void* x, const void* h, int dtype, int64_t rows, int64_t cols,
                                    int power_of_2, uint8_t* codes_rowwise, float* scale_inv_rowwise,
                                    uint8_t* codes_columnwise, float* scale_inv_columnwise, float* dbias,
                                    void* workspace, cudaStream_t stream);

// Bytes of device workspace fp8t_block_quantize_act needs for dbias.
size_t fp8t_block_quantize_workspace_bytes(int64_t rows, int64_t cols);

// out[i] = the value fp8t_block_quantize_act casts (act FP8T_ACT_GELU or FP8T_ACT_DGELU) for n
// elements of `dtype` (h: the GELU input of the backward, else null): the tests' bit-exact
// reference for the fused casts.
cudaError_t fp8t_activation_values(int act, const void* x, const void* h, int dtype, int64_t n, void* out,
                                   cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif
