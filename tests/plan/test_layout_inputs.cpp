// The planner and the data take a ParallelLayout (lib/config/parallel_layout.h): its stage and
// ranks decide, not the config's dist.zero alone.
#include <ATen/ATen.h>  // at::equal, at::cat

#include "lib/config/experiment.h"       // ExperimentConfig
#include "lib/config/parallel_layout.h"  // ParallelLayout, ZeroStage
#include "lib/data/dataset.h"            // data::Dataset
#include "lib/plan/resources.h"          // estimate_training_memory
#include "tests/catch.h"

using fp8t::ExperimentConfig;
using fp8t::ParallelLayout;
using fp8t::ZeroStage;

TEST_CASE("the memory estimate shards by the layout it is given", "[plan]") {
  ExperimentConfig c;  // dist.zero 0 in the config
  const auto one = fp8t::plan::estimate_training_memory(c);
  CHECK(one.weight_bytes_per_param == 4.0);
  CHECK(one.shard_ranks == 1);

  ParallelLayout full = ParallelLayout::of(c.dist, 0, 4);
  full.zero = ZeroStage::kFull;
  const auto zero3 = fp8t::plan::estimate_training_memory(c, full);
  CHECK(zero3.layout.shards_weights());
  CHECK(zero3.shard_ranks == 4);
  CHECK(zero3.weight_bytes_per_param == 1.0);  // 4 bytes / 4 ranks
  CHECK(zero3.grad_bytes_per_param == 1.0);
  CHECK(zero3.optimizer_bytes_per_param == 2.0);  // 8 bytes of FP32 moments / 4 ranks

  full.shard_group_size = 2;  // hybrid: shards of 2 ranks
  CHECK(fp8t::plan::estimate_training_memory(c, full).weight_bytes_per_param == 2.0);

  ParallelLayout zero1 = ParallelLayout::of(c.dist, 0, 4);
  zero1.zero = ZeroStage::kOptimizer;
  const auto z1 = fp8t::plan::estimate_training_memory(c, zero1);
  CHECK(z1.weight_bytes_per_param == 4.0);  // ZeRO-1 keeps every weight
  CHECK(z1.optimizer_bytes_per_param == 2.0);
  CHECK_THAT(z1.breakdown(c), FP8T_CONTAINS("dist.zero 1"));
}

TEST_CASE("the data draws the rows of the layout's data-parallel rank", "[plan]") {
  ExperimentConfig c;
  c.model.vocab_size = 64;
  c.model.seq_len = 8;
  const int64_t rows = 3;
  const auto whole = fp8t::data::Dataset::open(c.data, c.model, 5).val_batch(0, 2 * rows);
  const auto second = fp8t::data::Dataset::open(c.data, c.model, 5, ParallelLayout{.rank = 1, .world_size = 2})
                          .val_batch(0, rows);
  CHECK(at::equal(second.inputs, whole.inputs.slice(0, rows, 2 * rows)));
  CHECK_FALSE(at::equal(second.inputs, whole.inputs.slice(0, 0, rows)));
  // With a tensor-parallel group of 2, ranks 2 and 3 of 4 are data-parallel rank 1 of 2.
  ParallelLayout tp{.rank = 3, .world_size = 4};
  tp.tensor_parallel_size = 2;
  const auto tp_rows = fp8t::data::Dataset::open(c.data, c.model, 5, tp).val_batch(0, rows);
  CHECK(at::equal(tp_rows.inputs, second.inputs));
}
