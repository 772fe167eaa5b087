// The gather of a ZeRO-3 unit's FP8 Linear weights as FP8 (lib/dist/shard_group.h's FP8 group).
//
// Each rank casts the parts of the weights it owns from its FP32 master shard with the recipe's
// weight scale (Scaling::quantize; whole_amax recipes with the scale of the whole weight's amax,
// Scaling::sharded_weight_scale), once per weight key (the recipe's weight epoch and the masters'
// version: the codes of a step's forward and backward and of all its micro-batches are the same,
// as the FP8 weight cache of an unsharded layer gives them). Its codes (1 byte per element, in
// the group's layout) and its scales (per part: Scaling::part_scale_floats, one float under
// per-tensor scaling, the part's 128x128 block grid rows under block scaling) are all-gathered in
// two collectives; every layer then reads its weight's codes as a view of the gathered buffer and
// its scale_inv as the recipe assembles it (Scaling::gathered_scale_inv: the first owner's float,
// or the grid from every owner's rows). The columnwise copy dgrad needs
// is made from the gathered codes just in time (Fp8Linear's GatheredWeight).
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <vector>   // std::vector

#include "lib/dist/communicator.h"        // Pending
#include "lib/dist/shard_group.h"         // GroupParam, ShardingContext
#include "lib/dist/shard_layout.h"        // ShardLayout
#include "lib/fp8/backends/backend.h"     // Fp8Operand
#include "lib/fp8/recipes/scaling.h"      // Scaling::WeightParts

namespace fp8t {
namespace fp8 {
struct GatheredWeight;
}  // namespace fp8

namespace dist {

class Fp8Gather {
 public:
  // Attaches a GatheredWeight to every layer of `params` (detached again by the destructor).
  Fp8Gather(const std::vector<GroupParam>& params, const ShardLayout& layout, ShardingContext& ctx);
  ~Fp8Gather();
  Fp8Gather(const Fp8Gather&) = delete;
  Fp8Gather& operator=(const Fp8Gather&) = delete;

  void issue(const at::Tensor& master, bool record);
  int64_t complete();  // returns the bytes of the gathered codes and scales
  bool in_flight() const { return codes_pending_.valid(); }
  int64_t free();      // returns the bytes released
  void record_amax(const at::Tensor& master, const at::Tensor& amax) const;

 private:
  struct Weight {
    fp8::Fp8Linear* layer = nullptr;
    int fp8_index = -1;
    int64_t rows = 0, cols = 0, offset = 0;  // the weight's shape and place in the gathered codes
    std::shared_ptr<fp8::GatheredWeight> gathered;
    std::vector<int64_t> scale_begin, scale_count;  // per rank: its part's scales in its scale shard
  };
  // The part of weight w on this rank as the 2-D tensor its cast reads, or undefined.
  at::Tensor owned_part(const at::Tensor& master, size_t w) const;
  void cast_owned(const at::Tensor& master, bool record);
  at::Tensor scale_inv_of(const Weight& w) const;

  ShardingContext& ctx_;
  const ShardLayout& layout_;
  fp8::Scaling::WeightParts parts_;          // the recipe's rules for parts (bands, scale layout)
  std::vector<Weight> weights_;
  int64_t scale_shard_ = 0;                 // floats of scales per rank (padded to the largest)
  at::Tensor owned_codes_, owned_scales_;   // this rank's cast parts: uint8 [shard], float32 [scale_shard]
  ShardingContext::WeightKey owned_key_;
  bool owned_recorded_ = false;
  at::Tensor codes_, scales_;               // gathered
  Pending codes_pending_, scales_pending_;
};

}  // namespace dist
}  // namespace fp8t
