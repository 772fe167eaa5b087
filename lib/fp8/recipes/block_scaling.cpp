#include "lib/fp8/recipes/block_scaling.h"

#include "lib/fp8/backends/block_backend.h"   // block_quantize_source
#include "lib/numerics/block_math.h"          // kBlockLen, blk128_scale_rows, blk128_scale_stride
#include "lib/fp8/backends/block_quantize.h"  // block_cast_stats, BlockCodes, make_block_scales
#include "lib/util/error.h"                   // FP8T_CHECK

namespace fp8t {
namespace fp8 {

int64_t BlockScaling::part_scale_floats(int64_t rows, int64_t cols) const {
  return blk128_scale_rows(rows) * blk128_scale_stride(cols);
}

at::Tensor BlockScaling::flat_part_scales(const Fp8Operand& part, int64_t count) const {
  return part.scale_inv.as_strided({count}, {1}, 0);
}

at::Tensor BlockScaling::gathered_scale_inv(int64_t rows, int64_t cols, const std::vector<at::Tensor>& owners) const {
  FP8T_CHECK(!owners.empty(), "Fp8Gather: a weight without owner");
  const at::Tensor grid = make_block_scales(rows, cols, kBlockLen, owners.front().device(), /*zero_fill=*/false);
  const at::Tensor buffer = grid.as_strided({blk128_scale_rows(rows) * blk128_scale_stride(cols)}, {1}, 0);
  int64_t filled = 0;
  for (const at::Tensor& part : owners) {
    buffer.narrow(0, filled, part.numel()).copy_(part);
    filled += part.numel();
  }
  return grid;
}

int BlockScaling::block_rows(int slot) const { return slot_role(slot) == TensorRole::kWeight ? kBlockLen : 1; }

// One block cast of the requested layouts (and dbias). On CUDA a fused producer's value (GELU,
// its backward) is evaluated inside the cast kernel: each 128x128 tile is read once, its block
// amaxes and scales found in shared memory before any code is written (block_backend.h). The
// statistics (log steps only) look at the value in high precision.
Fp8Tensor BlockScaling::quantize(int slot, const CastSource& src, const CastOptions& opt) {
  FP8T_CHECK(finalized(), "BlockScaling used before finalize()");
  FP8T_CHECK(slot >= 0 && slot < num_slots(), "bad FP8 slot index ", slot);
  // recast_scale is undefined here: a recast finds its blocks' scales in the values again.
  FP8T_CHECK(!opt.scale.defined(), "fp8 block scaling: a cast takes no per-tensor scale (slot ", slot_name(slot), ")");
  FP8T_CHECK(opt.value_columnwise == nullptr, "fp8 block scaling: a SwiGLU gradient cast writes no value codes (slot ",
             slot_name(slot), ")");
  Fp8Tensor out = block_quantize_source(src, block_rows(slot), opt.rowwise, opt.columnwise,
                                        recipe_.block_power_of_2_scales, opt.dbias);
  if (recording(opt.record) && collect_stats()) record_stats(slot, materialize(src), out);
  return out;
}

// One statistics pass over the cast (log steps only): saturated and underflow fractions through
// the base accumulator, the block-scale range of the interval, the slot's amax and largest scale.
void BlockScaling::record_stats(int slot, const at::Tensor& x, const Fp8Tensor& q) {
  const bool row = q.rowwise.defined();
  const Fp8Operand& op = row ? q.rowwise : q.columnwise;
  const at::Tensor st = block_cast_stats(row ? x : x.t(), BlockCodes{op.codes, op.scale_inv}, block_rows(slot));
  record_range(slot, st);
}

// The block-scaled GEMMs' rules (lib/gemm/gemm_problem.h) on a Linear's dims: K (in) and N (out)
// are leading dimensions of the fprop/dgrad operands and wgrad's output, so both must be multiples
// of 16; out is also the M of wgrad's 1x128 dyᵀ (a multiple of 8: implied). Partial 128-blocks
// at the edges are fine, so no multiple of 128 is needed. The token count (M of fprop/dgrad, K of
// wgrad) is checked when the GEMMs run.
std::string BlockScaling::unsupported_linear(int64_t in_features, int64_t out_features) const {
  return dims_not_multiples_of_16(in_features, out_features, "block-scaled FP8 GEMM");
}


}  // namespace fp8
}  // namespace fp8t
