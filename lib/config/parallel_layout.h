// How a job's processes divide the work: the data-parallel group, what each rank shards
// (dist.zero) and within how many ranks (dist.shard_group_size), with room for a
// tensor-parallel group. A description only: lib/dist builds the process groups from it;
// data loading (lib/data), the step (lib/step), the planner (lib/plan) and checkpoints read it.
//
// The config key stays a number (dist.zero: 0, 1 or 3, also in the run folder's config.yaml);
// inside the program it is a ZeroStage, asked through ParallelLayout's queries.
#pragma once

#include <cstdint>   // int64_t
#include <optional>  // std::optional

namespace fp8t {

struct DistSection;

// What dist.zero shards across the ranks of a shard group.
enum class ZeroStage {
  kNone,       // dist.zero 0 (DDP): every rank holds all the state
  kOptimizer,  // dist.zero 1 (ZeRO-1): the AdamW moments and the FP32 gradients sharded
  kFull,       // dist.zero 3 (ZeRO-3): the FP32 weights, gradients and AdamW moments sharded
};

// dist.zero's number for `stage`: 0, 1 or 3 (the config file, messages, checkpoints).
int64_t zero_level(ZeroStage stage);
// The stage of dist.zero = `level`; nullopt for any other number than 0, 1 or 3.
std::optional<ZeroStage> zero_stage_of_level(int64_t level);
// Why dist.zero = `level` is refused ("2 is not offered; expected 0 (DDP), 1 ... or 3 ..."),
// without the key (the caller names it).
const char* zero_level_refusal(int64_t level);

struct ParallelLayout {
  int rank = 0;                       // this process among world_size
  int world_size = 1;                 // processes of the job (torchrun's WORLD_SIZE), one device each
  ZeroStage zero = ZeroStage::kNone;  // dist.zero
  // dist.shard_group_size as configured: 0 = all ranks, -1 = one group per node (resolved by
  // lib/dist from LOCAL_WORLD_SIZE), N = groups of N consecutive ranks. Only under kFull.
  int64_t shard_group_size = 0;
  int tensor_parallel_size = 1;  // ranks that split each layer (1: none; no key sets it yet)

  // The layout of `dist` for this process as rank `rank` of `world_size`.
  static ParallelLayout of(const DistSection& dist, int rank = 0, int world_size = 1);

  bool is_rank0() const { return rank == 0; }
  bool is_distributed() const { return world_size > 1; }
  // The data-parallel group: ranks that draw different rows of each global batch.
  int data_parallel_rank() const { return rank / tensor_parallel_size; }
  int data_parallel_size() const { return world_size / tensor_parallel_size; }
  // dist.zero 1 and 3: the AdamW moments and the FP32 gradients are divided over shard_ranks().
  bool shards_optimizer_state() const { return zero != ZeroStage::kNone; }
  bool shards_gradients() const { return zero != ZeroStage::kNone; }
  // dist.zero 3: the FP32 weights too; each unit's weights are gathered while it computes.
  bool shards_weights() const { return zero == ZeroStage::kFull; }
  // The ranks the sharded state is divided by: 1 when nothing is sharded; under kFull
  // shard_group_size when it is positive and smaller than the job; else the whole job.
  int shard_ranks() const;
  // dist.zero's number (0, 1, 3).
  int64_t zero_level() const { return fp8t::zero_level(zero); }
};

}  // namespace fp8t
