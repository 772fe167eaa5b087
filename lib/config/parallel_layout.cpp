#include "lib/config/parallel_layout.h"

#include <algorithm>         // std::max
#include <initializer_list>  // the stages looped over

#include "lib/config/experiment.h"  // DistSection

namespace fp8t {

int64_t zero_level(ZeroStage stage) {
  switch (stage) {
    case ZeroStage::kNone: return 0;
    case ZeroStage::kOptimizer: return 1;
    case ZeroStage::kFull: return 3;
  }
  return 0;
}

std::optional<ZeroStage> zero_stage_of_level(int64_t level) {
  for (ZeroStage s : {ZeroStage::kNone, ZeroStage::kOptimizer, ZeroStage::kFull}) {
    if (zero_level(s) == level) return s;
  }
  return std::nullopt;
}

const char* zero_level_refusal(int64_t level) {
  return level == 2 ? "2 is not offered; expected 0 (DDP), 1 (ZeRO-1: optimizer state sharded) or "
                      "3 (ZeRO-3: weights, gradients and optimizer state sharded)"
                    : "expected 0 (DDP), 1 (ZeRO-1: optimizer state sharded) or "
                      "3 (ZeRO-3: weights, gradients and optimizer state sharded)";
}

ParallelLayout ParallelLayout::of(const DistSection& dist, int rank, int world_size) {
  ParallelLayout l;
  l.rank = rank;
  l.world_size = world_size;
  l.zero = dist.zero;
  l.shard_group_size = dist.shard_group_size;
  return l;
}

int ParallelLayout::shard_ranks() const {
  const int world = std::max(world_size, 1);
  if (!shards_optimizer_state()) return 1;
  const int64_t group = shard_group_size;
  return shards_weights() && group > 0 && group < world ? static_cast<int>(group) : world;
}

}  // namespace fp8t
