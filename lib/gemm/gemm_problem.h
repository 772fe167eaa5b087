// What one GEMM is (shape, types, layout, epilogue) and whether cuBLASLt can run it.
//
// The convention of the whole project: out[M,N] = A[M,K] · B[N,K]ᵀ (+ bias[N]) with both
// operands row-major and K contiguous (x·Wᵀ of a Linear). cuBLASLt is column-major, so the engine
// passes B as cuBLAS "A" with TRANSA=T and A as cuBLAS "B" with TRANSB=N; D is then the row-major
// [M,N] (docs/fp8-formats.md, "cuBLASLt"). Only the BF16 path also accepts transposed storage.
//
// Block-scaled FP8 GEMMs (the block recipe) give each operand a scale mode: one factor per 1x128
// block along K (kVec128) or per 128x128 block (kBlk128x128) instead of one per tensor; the scale
// layouts are lib/numerics/block_math.h's (docs/fp8.md, "Block scaling"). Row-scaled GEMMs (the
// row-wise recipe) give both operands one factor per row (kRowVector; docs/fp8.md, "Row-wise scaling").
//
// validate() runs on the host before anything touches the device, so its errors (which name the
// GEMM, the shape and the fix) are testable without a GPU.
#pragma once

#include <cstddef>  // size_t
#include <cstdint>  // int64_t
#include <string>   // std::string

#include "lib/numerics/format.h"  // fp8::Format

namespace fp8t {
namespace gemm {

enum class DataType : int { kE4M3, kE5M2, kBF16, kF32 };

const char* to_string(DataType t);
bool is_fp8(DataType t);
DataType from_format(fp8::Format f);
size_t element_size(DataType t);

// How an FP8 operand's scale_inv is given (cuBLASLt's cublasLtMatmulMatrixScale_t): one float for
// the tensor (SCALAR_32F), one per 128 consecutive values along K (VEC128_32F), one per 128x128
// block (BLK128x128_32F), one per row of the operand, i.e. per row of A and per column of the
// output for B (kRowVector: OUTER_VEC_32F, the row-wise recipe); the last three need cuBLAS >= 12.9
// and Hopper.
enum class ScaleMode : int { kScalar, kVec128, kBlk128x128, kRowVector };
const char* to_string(ScaleMode m);

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  DataType a_type = DataType::kE4M3;
  DataType b_type = DataType::kE4M3;
  DataType out_type = DataType::kBF16;
  bool has_bias = false;     // bias[N], added in the epilogue
  bool fast_accum = false;   // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM
  bool trans_a = false;      // BF16 only: A stored as [K,M] (row-major) instead of [M,K]
  bool trans_b = false;      // BF16 only: B stored as [K,N] (row-major) instead of [N,K]
  ScaleMode a_scale = ScaleMode::kScalar;  // FP8 only
  ScaleMode b_scale = ScaleMode::kScalar;
  bool accumulate = false;   // BF16 only: out = A·Bᵀ + out (cuBLASLt beta = 1, C = D); no bias
  std::string label = "gemm";  // which GEMM ("fprop", "dgrad", "wgrad", "bench"): names errors

  bool fp8() const { return is_fp8(a_type) || is_fp8(b_type); }
  // Scales other than one per tensor: block (1x128, 128x128) or row vectors.
  bool block_scaled() const { return a_scale != ScaleMode::kScalar || b_scale != ScaleMode::kScalar; }
  bool row_scaled() const { return a_scale == ScaleMode::kRowVector || b_scale == ScaleMode::kRowVector; }
};

// "fp8 gemm fprop 8192x768x3072 (MxKxN, E4M3 x E4M3 -> BF16)"; block-scaled:
// "fp8 gemm fprop 8192x768x3072 (MxKxN, E4M3 1x128 x E4M3 128x128 -> BF16)"
std::string describe(const GemmProblem& p);

// Throws fp8t::Error (kBadInput) naming the GEMM, its shape and what to do when cuBLASLt cannot
// run the problem: FP8 needs K and N multiples of 16, the TN layout, not E5M2 x E5M2, BF16 or
// FP32 output; BF16 GEMMs need both operands BF16. Negative sizes are rejected too. Block-scaled
// GEMMs also need both operands block-scaled but not both 128x128, split accumulation (no fast
// accumulation), and M a multiple of 8 when A is 1x128-scaled (cuBLASLt's rules for these modes).
// Row-scaled GEMMs need both operands row-scaled (fast accumulation allowed).
void validate(const GemmProblem& p);

// FP8 GEMMs need compute capability >= 8.9 (Ada, Hopper and later). Throws kBadInput with the
// device name otherwise.
void validate_fp8_device(int cc_major, int cc_minor, const std::string& device_name);

}  // namespace gemm
}  // namespace fp8t
