#include "lib/gemm/gemm_problem.h"

#include <sstream>  // std::ostringstream

#include "lib/util/error.h"  // FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t {
namespace gemm {

const char* to_string(DataType t) {
  switch (t) {
    case DataType::kE4M3: return "E4M3";
    case DataType::kE5M2: return "E5M2";
    case DataType::kBF16: return "BF16";
    case DataType::kF32: return "FP32";
  }
  return "?";
}

const char* to_string(ScaleMode m) {
  switch (m) {
    case ScaleMode::kScalar: return "per-tensor";
    case ScaleMode::kVec128: return "1x128";
    case ScaleMode::kBlk128x128: return "128x128";
    case ScaleMode::kRowVector: return "row-wise";
  }
  return "?";
}

bool is_fp8(DataType t) { return t == DataType::kE4M3 || t == DataType::kE5M2; }

DataType from_format(fp8::Format f) { return f == fp8::Format::kE4M3 ? DataType::kE4M3 : DataType::kE5M2; }

size_t element_size(DataType t) {
  switch (t) {
    case DataType::kE4M3:
    case DataType::kE5M2: return 1;
    case DataType::kBF16: return 2;
    case DataType::kF32: return 4;
  }
  return 0;
}

std::string describe(const GemmProblem& p) {
  std::ostringstream os;
  os << (p.fp8() ? "fp8" : "bf16") << " gemm " << p.label << " " << p.m << "x" << p.k << "x" << p.n
     << " (MxKxN, " << to_string(p.a_type);
  if (p.block_scaled()) os << " " << to_string(p.a_scale);
  os << " x " << to_string(p.b_type);
  if (p.block_scaled()) os << " " << to_string(p.b_scale);
  os << " -> " << to_string(p.out_type) << ")";
  return os.str();
}

namespace {

// What to do about a dimension that is not a multiple of 16. The token dimension (M of fprop and
// dgrad, K of wgrad) comes from batch * sequence; the others are layer widths.
std::string alignment_hint(const GemmProblem& p, char dim) {
  const bool tokens = p.label == "wgrad" && dim == 'K';
  if (tokens) {
    return "make batch_size * seq_len a multiple of 16, or keep this layer's wgrad in high precision "
           "(fp8.override_linear_precision)";
  }
  return "keep this layer in high precision (fp8.skip_layers) or pad it";
}

// The rules of cuBLASLt's block scale modes (VEC128_32F, BLK128x128_32F) on Hopper, in our naming
// (the engine passes our B as cuBLAS A): both operands block-scaled, not both 128x128, no fast
// accumulation, cuBLAS n = our M a multiple of 8 when our A (cuBLAS B) is 1x128-scaled (cuBLAS
// m = our N: a multiple of 16 already). Row vectors (OUTER_VEC_32F): both operands, fast
// accumulation allowed.
void validate_block_scaled(const GemmProblem& p) {
  if (p.row_scaled()) {  // OUTER_VEC_32F: set for both operands, nothing else mixed in
    FP8T_INPUT_CHECK(p.a_scale == ScaleMode::kRowVector && p.b_scale == ScaleMode::kRowVector, describe(p),
                     ": a row-scaled operand needs a row-scaled partner (cuBLASLt's OUTER_VEC_32F mode is set for "
                     "both operands)");
    return;
  }
  FP8T_INPUT_CHECK(p.a_scale != ScaleMode::kScalar && p.b_scale != ScaleMode::kScalar, describe(p),
                   ": a block-scaled operand needs a block-scaled partner (per-tensor x block scales is not a "
                   "cuBLASLt mode)");
  FP8T_INPUT_CHECK(!(p.a_scale == ScaleMode::kBlk128x128 && p.b_scale == ScaleMode::kBlk128x128), describe(p),
                   ": 128x128 x 128x128 block scaling is not supported by cuBLASLt (1x128 x 1x128, 1x128 x 128x128 "
                   "and 128x128 x 1x128 are)");
  FP8T_INPUT_CHECK(!p.fast_accum, describe(p),
                   ": block-scaled FP8 GEMMs use split accumulation only (cuBLASLt has no fast accumulation for "
                   "block scales)");
  FP8T_INPUT_CHECK(p.a_scale != ScaleMode::kVec128 || p.m % 8 == 0, describe(p), ": M=", p.m,
                   " is not a multiple of 8 (cuBLASLt requirement of a 1x128-scaled A); ",
                   p.label == "wgrad" ? "keep this layer in high precision (fp8.skip_layers)"
                                      : "make batch_size * seq_len a multiple of 8");
}

}  // namespace

void validate(const GemmProblem& p) {
  // describe(p) is evaluated only when a check fails: validate() runs on every GEMM call.
  FP8T_INPUT_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0, describe(p), ": negative dimension");
  FP8T_INPUT_CHECK(p.out_type == DataType::kBF16 || p.out_type == DataType::kF32, describe(p),
                   ": output must be BF16 or FP32, got ", to_string(p.out_type));
  FP8T_INPUT_CHECK(!p.accumulate || (!p.fp8() && !p.has_bias), describe(p),
                   ": accumulating into the output (beta = 1) is offered for BF16 GEMMs without bias only");
  if (!p.fp8()) {
    FP8T_INPUT_CHECK(p.a_type == DataType::kBF16 && p.b_type == DataType::kBF16, describe(p),
                     ": the high-precision GEMM takes BF16 x BF16 operands");
    return;
  }
  FP8T_INPUT_CHECK(!(p.has_bias && p.out_type == DataType::kF32), describe(p),
                   ": the BIAS epilogue of an FP8 GEMM needs BF16 output (add the bias afterwards)");
  FP8T_INPUT_CHECK(is_fp8(p.a_type) && is_fp8(p.b_type), describe(p),
                   ": both operands must be FP8 (mixed FP8 x BF16 is not supported by cuBLASLt)");
  FP8T_INPUT_CHECK(!(p.a_type == DataType::kE5M2 && p.b_type == DataType::kE5M2), describe(p),
                   ": E5M2 x E5M2 is not supported by cuBLASLt; use fp8.fp8_format HYBRID (E5M2 only for "
                   "gradients, which always meet E4M3 operands) or E4M3");
  FP8T_INPUT_CHECK(!p.trans_a && !p.trans_b, describe(p),
                   ": FP8 GEMMs on Hopper need both operands K-contiguous (the TN layout); cast the "
                   "columnwise copy (cast_transpose) instead of transposing");
  FP8T_INPUT_CHECK(p.k % 16 == 0, describe(p), ": K=", p.k,
                   " is not a multiple of 16 (cuBLASLt FP8 requirement); ", alignment_hint(p, 'K'));
  FP8T_INPUT_CHECK(p.n % 16 == 0, describe(p), ": N=", p.n,
                   " is not a multiple of 16 (cuBLASLt FP8 requirement on the output's leading "
                   "dimension); ",
                   alignment_hint(p, 'N'));
  if (p.block_scaled()) validate_block_scaled(p);
}

void validate_fp8_device(int cc_major, int cc_minor, const std::string& device_name) {
  const int cc = cc_major * 10 + cc_minor;
  FP8T_INPUT_CHECK(cc >= 89, "FP8 GEMMs need a GPU of compute capability 8.9 or newer (Ada, Hopper); ",
                   device_name, " is ", cc_major, ".", cc_minor,
                   ". Train with precision: bf16, or run FP8 on the CPU emulation (run.device: cpu)");
}

}  // namespace gemm
}  // namespace fp8t
