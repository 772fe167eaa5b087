// lib/config/parallel_layout.h: dist.zero read as a ZeroStage (the file and the flags keep the
// numbers 0, 1, 3), and ParallelLayout's queries.
#include <optional>  // std::optional
#include <string>    // std::string
#include <utility>   // std::pair
#include <vector>    // std::vector

#include "lib/config/parallel_layout.h"
#include "tests/config/config_test_util.h"  // from_yaml, bad_yaml_message, parse_flags

using fp8t::ParallelLayout;
using fp8t::ZeroStage;
using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::bad_yaml_message;
using fp8t::config::testing::from_yaml;
using fp8t::config::testing::parse_flags;

namespace {

const std::vector<std::pair<int64_t, ZeroStage>> kLevels = {
    {0, ZeroStage::kNone}, {1, ZeroStage::kOptimizer}, {3, ZeroStage::kFull}};

}  // namespace

TEST_CASE("dist.zero 0, 1 and 3 load as stages and are written back as the numbers", "[config]") {
  for (const auto& [level, stage] : kLevels) {
    INFO("dist.zero " << level);
    const fp8t::ExperimentConfig c = from_yaml("dist:\n  zero: " + std::to_string(level) + "\n").config;
    CHECK(c.dist.zero == stage);
    CHECK(fp8t::zero_level(stage) == level);
    // config.yaml in a run folder keeps the number, so old run folders resume.
    const std::string yaml = fp8t::config::to_yaml(c);
    CHECK_THAT(yaml, FP8T_CONTAINS("zero: " + std::to_string(level) + "\n"));
    CHECK(from_yaml(yaml).config.dist.zero == stage);
    // --zero and --set give the same stage.
    CHECK(from_yaml("run:\n  seed: 1\n", parse_flags({"--zero", std::to_string(level)})).config.dist.zero == stage);
  }
}

TEST_CASE("dist.zero 2 and numbers out of range are refused with the key named", "[config]") {
  const std::string two = bad_yaml_message("run:\n  seed: 1\ndist:\n  zero: 2\n");
  CHECK_THAT(two, FP8T_CONTAINS("dist.zero (test.yaml:4): 2 is not offered; expected 0 (DDP), 1 (ZeRO-1"));
  const std::string flag = bad_input_message([] { from_yaml("run:\n  seed: 1\n", parse_flags({"--zero", "2"})); });
  CHECK_THAT(flag, FP8T_CONTAINS("dist.zero ("));
  CHECK_THAT(flag, FP8T_CONTAINS("2 is not offered"));
  for (const char* bad : {"4", "-1"}) {
    INFO("dist.zero " << bad);
    const std::string msg = bad_yaml_message(std::string("dist:\n  zero: ") + bad + "\n");
    CHECK_THAT(msg, FP8T_CONTAINS("dist.zero (test.yaml:2): expected an integer in [0, 3], got " + std::string(bad)));
  }
  CHECK_FALSE(fp8t::zero_stage_of_level(2).has_value());
  CHECK_FALSE(fp8t::zero_stage_of_level(-1).has_value());
  REQUIRE(fp8t::zero_stage_of_level(3).has_value());
  CHECK(*fp8t::zero_stage_of_level(3) == ZeroStage::kFull);
}

TEST_CASE("ParallelLayout's queries follow the stage, the ranks and the shard group", "[config]") {
  fp8t::DistSection d;
  const ParallelLayout single = ParallelLayout::of(d);
  CHECK(single.is_rank0());
  CHECK_FALSE(single.is_distributed());
  CHECK(single.data_parallel_size() == 1);
  CHECK(single.shard_ranks() == 1);

  const ParallelLayout ddp = ParallelLayout::of(d, 3, 8);
  CHECK_FALSE(ddp.is_rank0());
  CHECK(ddp.is_distributed());
  CHECK(ddp.data_parallel_rank() == 3);
  CHECK(ddp.data_parallel_size() == 8);
  CHECK_FALSE(ddp.shards_optimizer_state());
  CHECK_FALSE(ddp.shards_gradients());
  CHECK_FALSE(ddp.shards_weights());
  CHECK(ddp.shard_ranks() == 1);  // nothing is divided
  CHECK(ddp.zero_level() == 0);

  d.zero = ZeroStage::kOptimizer;
  d.shard_group_size = 2;  // only ZeRO-3 shards within groups
  const ParallelLayout zero1 = ParallelLayout::of(d, 0, 8);
  CHECK(zero1.shards_optimizer_state());
  CHECK(zero1.shards_gradients());
  CHECK_FALSE(zero1.shards_weights());
  CHECK(zero1.shard_ranks() == 8);
  CHECK(zero1.zero_level() == 1);

  d.zero = ZeroStage::kFull;
  const ParallelLayout hybrid = ParallelLayout::of(d, 5, 8);
  CHECK(hybrid.shards_optimizer_state());
  CHECK(hybrid.shards_weights());
  CHECK(hybrid.shard_ranks() == 2);  // groups of 2, replicated across 4 groups
  CHECK(hybrid.zero_level() == 3);
  d.shard_group_size = 0;  // all ranks
  CHECK(ParallelLayout::of(d, 5, 8).shard_ranks() == 8);
  d.shard_group_size = -1;  // one group per node: lib/dist resolves it; the planner counts the job
  CHECK(ParallelLayout::of(d, 5, 8).shard_ranks() == 8);
  d.shard_group_size = 16;  // larger than the job: the job
  CHECK(ParallelLayout::of(d, 5, 8).shard_ranks() == 8);

  ParallelLayout tp = ParallelLayout::of(d, 5, 8);
  tp.tensor_parallel_size = 2;  // no key sets it yet: the data-parallel group is the job / 2
  CHECK(tp.data_parallel_rank() == 2);
  CHECK(tp.data_parallel_size() == 4);
}
