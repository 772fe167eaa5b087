// The row-wise recipe's state class (torchao's and torchtitan's "rowwise" float8 recipe): one
// implementation of the scaling interface, lib/fp8/recipes/scaling.h.
//
// Every cast computes one FP32 scale per row of the GEMM operand it produces, from that row's own
// amax (lib/numerics/rowwise_math.h): the rowwise copy of x [rows, K] has one scale per row (per
// token of an activation or gradient, per output feature of a weight), the columnwise copy one per
// column of x (its amax over the rows). Scales are rounded down to powers of 2 and every tensor is
// E4M3, as torchao's recipe does (gradients included: their row scales give E4M3 the range E5M2
// would otherwise buy). The operands carry ScaleLayout kRowwise to cuBLASLt's OUTER_VEC_32F GEMM
// (fast accumulation per fp8.fast_accumulation). No amax history, no update, no cross-rank
// reduction; weights are cast once per optimizer step (Fp8Linear's weight cache, weight_epoch()),
// both layouts kept (a row-scaled copy cannot be transposed). Fused producers (GELU, SwiGLU, their
// backwards, the norm) hand over their value in high precision, which is then cast.
//
// Sharded weights (ZeRO-3) travel in the compute dtype and are cast where they are used
// (WeightParts::fp8_gather false): dgrad's Wᵀ needs one scale per column of the whole weight.
//
// State (statistics and the precision chart) and step boundaries: PerCastScaling's (the amax and
// largest row scale of each slot's last measured cast, the interval's row-scale range). Nothing is
// needed to resume bit-exactly: a resumed run computes the same scales from the same tensors.
#pragma once

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/recipes/per_cast_scaling.h"  // PerCastScaling

namespace fp8t {
namespace fp8 {

class RowwiseScaling final : public PerCastScaling {
 public:
  explicit RowwiseScaling(const Recipe& recipe) : PerCastScaling(recipe) {}
  RecipeKind kind() const override { return RecipeKind::kRowwise; }

  Format format_for(TensorRole /*role*/) const override { return Format::kE4M3; }

  Fp8Tensor quantize(int slot, const CastSource& src, const CastOptions& opt) override;

  WeightParts weight_parts() const override { return WeightParts{0, false, ScaleLayout::kRowwise, false}; }
  bool transposes_weight_codes() const override { return false; }
  std::string unsupported_linear(int64_t in_features, int64_t out_features) const override;
};

}  // namespace fp8
}  // namespace fp8t
