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

#include <map>     // std::map
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/fp8/recipes/scaling.h"  // Scaling

namespace fp8t {
namespace fp8 {

class BlockScaling final : public Scaling {
 public:
  explicit BlockScaling(const Recipe& recipe);
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

  void end_micro_batch(bool last_of_step, const at::Tensor& skip = at::Tensor()) override;
  int64_t weight_epoch() const override { return steps_ended_; }

  std::vector<SlotStats> read_stats() override { return scale_range_stats(ranges_); }

  // [1, S] / [S] / [S]: see the file comment (zeros and ones until statistics are collected).
  const at::Tensor& amax_history() const override { return ranges_.amax_rows(); }
  const at::Tensor& scale() const override { return ranges_.scale(); }
  const at::Tensor& scale_inv() const override { return ranges_.scale_inv(); }

  std::map<std::string, at::Tensor> state_dict() const override { return {}; }
  void load_state_dict(const std::map<std::string, at::Tensor>& /*state*/) override {}

 protected:
  void allocate(const at::Device& device) override { ranges_.allocate(num_slots(), device); }

 private:
  void record_stats(int slot, const at::Tensor& x, const Fp8Tensor& q);

  ScaleRangeStats ranges_;  // the last measured cast of each slot, the interval's block scales
  int64_t steps_ended_ = 0;
};

}  // namespace fp8
}  // namespace fp8t
