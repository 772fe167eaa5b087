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
// State (statistics and the precision chart): ScaleRangeStats (the amax and largest row scale of
// each slot's last measured cast, the interval's row-scale range). Nothing is needed to resume
// bit-exactly: a resumed run computes the same scales from the same tensors.
#pragma once

#include <map>     // std::map
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/recipes/scaling.h"  // Scaling, ScaleRangeStats

namespace fp8t {
namespace fp8 {

class RowwiseScaling final : public Scaling {
 public:
  explicit RowwiseScaling(const Recipe& recipe) : Scaling(recipe) {}
  RecipeKind kind() const override { return RecipeKind::kRowwise; }

  Format format_for(TensorRole /*role*/) const override { return Format::kE4M3; }

  Fp8Tensor quantize(int slot, const CastSource& src, const CastOptions& opt) override;

  WeightParts weight_parts() const override { return WeightParts{0, false, ScaleLayout::kRowwise, false}; }
  bool transposes_weight_codes() const override { return false; }
  std::string unsupported_linear(int64_t in_features, int64_t out_features) const override;

  void end_micro_batch(bool last_of_step, const at::Tensor& /*skip*/ = at::Tensor()) override {
    if (last_of_step) ++steps_ended_;
  }
  int64_t weight_epoch() const override { return steps_ended_; }

  std::vector<SlotStats> read_stats() override { return scale_range_stats(ranges_); }

  // [1, S] / [S] / [S]: the last measured cast's amax, largest row scale and its inverse.
  const at::Tensor& amax_history() const override { return ranges_.amax_rows(); }
  const at::Tensor& scale() const override { return ranges_.scale(); }
  const at::Tensor& scale_inv() const override { return ranges_.scale_inv(); }

  std::map<std::string, at::Tensor> state_dict() const override { return {}; }
  void load_state_dict(const std::map<std::string, at::Tensor>& /*state*/) override {}

 protected:
  void allocate(const at::Device& device) override { ranges_.allocate(num_slots(), device); }

 private:
  ScaleRangeStats ranges_;
  int64_t steps_ended_ = 0;
};

}  // namespace fp8
}  // namespace fp8t
