// Block-scaled FP8 casts of the block recipe (TE Float8BlockScaling) for LibTorch tensors, on the
// CPU emulation (block_cpu.cpp) or the GPU (block_quantize_cuda.cpp, kernels/block_quantize.cu),
// bit-identical on both; their inverse and the health statistics of a cast.
//
// Formulas and layouts: lib/numerics/block_math.h. E4M3 only. A cast of x [rows, K]:
//   block_rows = 1:   1x128 blocks along K (activations, gradients). The columnwise copy (codes of
//                     x^T, [K, rows]) has its own 1x128 blocks along rows, quantized from x: a
//                     1x128-quantized tensor cannot be transposed.
//   block_rows = 128: 128x128 blocks (weights). The columnwise copy is the transposed codes with
//                     the transposed scale grid (a square block transposes exactly).
// Scale tensors are LOGICAL block grids viewing the padded buffers cuBLASLt reads:
//   1x128 of [rows, K]:   sizes [rows, ceil(K/128)], strides (1, round_up4(rows));
//   128x128 of [rows, K]: sizes [ceil(rows/128), ceil(K/128)], strides (round_up4(ceil(K/128)), 1);
// data_ptr() is the start of the buffer, padding entries are 0.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <string>   // std::string

namespace fp8t {
namespace fp8 {

// One block-scaled FP8 operand: codes [rows, K] (K contiguous) and the scale_inv grid above.
struct BlockCodes {
  at::Tensor codes;      // uint8 [rows, K]
  at::Tensor scale_inv;  // float32 block grid (see the file comment)
  bool defined() const { return codes.defined(); }
};

struct BlockQuantized {
  BlockCodes rowwise;     // x [rows, K]
  BlockCodes columnwise;  // x^T [K, rows]
};

// The cast on x's device (CPU emulation or CUDA). x: 2-D, any float dtype (fp16/fp64 are cast as
// fp32, which gives the same codes and scales as fp16 itself: the conversion is exact and no fp16
// amax can overflow fp8_max / amax). power_of_2: fp8.block_power_of_2_scales.
BlockQuantized block_quantize(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise, bool power_of_2);
BlockQuantized block_quantize_cpu(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise,
                                  bool power_of_2);
#if defined(FP8T_WITH_CUDA)
BlockQuantized block_quantize_cuda(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise,
                                   bool power_of_2);
#endif

// What a fused 1x128 cast evaluates in its kernel (kernels/block_quantize.cu) before quantising:
// x itself, gelu(x), or the GELU backward dy * gelu'(h) of dy = x (tanh approximation, the
// functions of the per-tensor fused casts), rounded to the input dtype.
enum class BlockAct { kNone, kGelu, kDgelu };
#if defined(FP8T_WITH_CUDA)
// The 1x128 cast of act's value on x's device without writing the value in high precision: the
// codes and scales of block_quantize_cuda(value, 1, ...). x and h (kDgelu: the GELU input, of
// x's dtype; else undefined) 2-D fp32 or bf16 CUDA tensors of one shape. dbias (nullable): set to
// the column sums of the value, FP32 [cols], computed in the same kernel.
BlockQuantized block_quantize_act_cuda(BlockAct act, const at::Tensor& x, const at::Tensor& h, bool rowwise,
                                       bool columnwise, bool power_of_2, at::Tensor* dbias);
#endif

// A scale grid for an operand [rows, k] (the layout above) on `device`; zero_fill = false leaves
// it uninitialised (for a kernel that writes every entry, padding included).
at::Tensor make_block_scales(int64_t rows, int64_t k, int block_rows, const at::Device& device, bool zero_fill = true);
// Whether `s` is exactly that grid: float32, sizes and strides as above, storage offset 0.
bool has_block_scale_layout(const at::Tensor& s, int64_t rows, int64_t k, int block_rows);
// "[rows, ceil(K/128)] float32 with strides (1, round_up4(rows))" for error messages.
std::string describe_block_scale_layout(int64_t rows, int64_t k, int block_rows);

// Every element's scale_inv: float32 [rows, k] on the grid's device.
at::Tensor expand_block_scales(const at::Tensor& scale_inv, int64_t rows, int64_t k, int block_rows);
// The dequantized values decode(codes) * scale_inv of their block, float32 [rows, K] on the codes'
// device (the CPU emulation's GEMM operands; the tests' references).
at::Tensor block_dequantize(const BlockCodes& op, int block_rows);

// FP8 health statistics of a block cast of x: float32 [5] on x's device = {fraction of elements
// that saturate (|x * scale| > 448, block_saturates), fraction of non-zero elements whose code is
// +-0, smallest block scale, largest block scale, max|x| (NaN ignored)} (scale = 1 / scale_inv of
// the block: exact for power-of-2 scales).
at::Tensor block_cast_stats(const at::Tensor& x, const BlockCodes& q, int block_rows);

}  // namespace fp8
}  // namespace fp8t
