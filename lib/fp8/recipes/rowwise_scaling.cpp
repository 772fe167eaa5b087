#include "lib/fp8/recipes/rowwise_scaling.h"

#include "lib/fp8/backends/rowwise_quantize.h"  // rowwise_quantize_source, rowwise_cast_stats
#include "lib/util/error.h"                     // FP8T_CHECK

namespace fp8t {
namespace fp8 {

// The asked layouts (both for a gradient source) and dbias; the statistics (log steps only) look
// at the value in high precision and the layout the cast wrote first.
Fp8Tensor RowwiseScaling::quantize(int slot, const CastSource& src, const CastOptions& opt) {
  FP8T_CHECK(finalized(), "RowwiseScaling used before finalize()");
  FP8T_CHECK(slot >= 0 && slot < num_slots(), "bad FP8 slot index ", slot);
  // recast_scale is undefined here: a recast finds the same row scales in the same values.
  FP8T_CHECK(!opt.scale.defined(), "fp8 rowwise scaling: a cast takes no per-tensor scale (slot ", slot_name(slot),
             ")");
  FP8T_CHECK(opt.value_columnwise == nullptr, "fp8 rowwise scaling: a SwiGLU gradient cast writes no value codes (slot ",
             slot_name(slot), ")");
  Fp8Tensor out = rowwise_quantize_source(src, opt.rowwise, opt.columnwise, opt.dbias);
  if (recording(opt.record) && collect_stats()) {
    const at::Tensor x = materialize(src);
    const bool row = out.rowwise.defined();
    const at::Tensor st = rowwise_cast_stats(row ? x : x.t(), row ? out.rowwise : out.columnwise);
    record_range(slot, st);
  }
  return out;
}

// cuBLASLt's FP8 rules on a Linear's dims: K (in) and N (out) are leading dimensions of the fprop
// and dgrad operands and of wgrad's output, so both must be multiples of 16. The token count (M of
// fprop/dgrad, K of wgrad) is checked when the GEMMs run.
std::string RowwiseScaling::unsupported_linear(int64_t in_features, int64_t out_features) const {
  return dims_not_multiples_of_16(in_features, out_features, "row-scaled FP8 GEMM");
}

}  // namespace fp8
}  // namespace fp8t
