// The block-scaling recipe's state class (TransformerEngine's Float8BlockScaling, the DeepSeek-V3
// scheme): one implementation of the scaling interface, lib/fp8/recipes/scaling.h.
//
// Every cast computes one FP32 scale per block from the block's own amax (lib/numerics/block_math.h):
// 1x128 blocks along K for activations and gradients, 128x128 blocks for weights, E4M3 everywhere,
// scales rounded down to powers of 2 under fp8.block_power_of_2_scales. The operands carry their
// scale grids (ScaleLayout kBlock1x128 / kBlock128x128) to the block-scaled GEMMs (split
// accumulation only). No amax history, no update, no cross-rank reduction; weights are cast once
// per optimizer step (Fp8Linear's weight cache, weight_epoch()). The GELU and its backward are
// evaluated inside the block cast kernel on CUDA (never written in high precision; the kernel
// finds every block's amax in shared memory before it writes a code); the norm writes its output
// in high precision, which is then block-cast.
//
// State ([S] float32 on the device; statistics and the precision chart): the amax and the largest
// block scale (scale_inv: its inverse) of each slot's last cast measured for the statistics, and
// the smallest and largest block scale of the current log interval. Nothing is needed to resume
// bit-exactly: a resumed run computes the same scales from the same tensors.
#pragma once

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/recipes/per_cast_scaling.h"  // PerCastScaling

namespace fp8t {
namespace fp8 {

class BlockScaling final : public PerCastScaling {
 public:
  explicit BlockScaling(const Recipe& recipe) : PerCastScaling(recipe) {}
  RecipeKind kind() const override { return RecipeKind::kBlock; }

  Format format_for(TensorRole /*role*/) const override { return Format::kE4M3; }
  // 1 (1x128 blocks) for activations and gradients, 128 (128x128 blocks) for weights.
  int block_rows(int slot) const;

  Fp8Tensor quantize(int slot, const CastSource& src, const CastOptions& opt) override;

  // Sharded weights: whole 128-row bands, each with its own 128x128 block scales.
  WeightParts weight_parts() const override { return WeightParts{128, false, ScaleLayout::kBlock128x128}; }
  int64_t part_scale_floats(int64_t rows, int64_t cols) const override;
  at::Tensor flat_part_scales(const Fp8Operand& part, int64_t count) const override;
  at::Tensor gathered_scale_inv(int64_t rows, int64_t cols, const std::vector<at::Tensor>& owners) const override;

  bool fast_accumulation(GemmKind /*kind*/) const override { return false; }
  std::string unsupported_linear(int64_t in_features, int64_t out_features) const override;

 private:
  void record_stats(int slot, const at::Tensor& x, const Fp8Tensor& q);
};

}  // namespace fp8
}  // namespace fp8t
