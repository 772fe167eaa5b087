#include "lib/plan/memory_plan.h"

#include <sstream>  // std::ostringstream
#include <string>   // std::string

#include "lib/util/error.h"
#include "tests/catch.h"

using namespace fp8t;
using namespace fp8t::plan;

namespace {

const Lever* find_lever(const MemoryPlan& plan, const std::string& setting) {
  for (const Lever& l : plan.levers) {
    if (l.setting == setting) return &l;
  }
  return nullptr;
}

double total(const ExperimentConfig& c, int world) { return estimate_training_memory(c, ParallelLayout::of(c.dist, 0, world)).total_bytes(); }

}  // namespace

TEST_CASE("memory plan: the verdict compares the estimate with the device's memory", "[plan]") {
  ExperimentConfig c;
  const double need = total(c, 4);
  const MemoryPlan exact = plan_memory(c, PlanTarget{4, need, "test device"});
  CHECK(exact.fits);
  CHECK(exact.estimate.total_bytes() == need);
  const std::string text = format_memory_plan(exact);
  CHECK_THAT(text, FP8T_CONTAINS("memory per rank on 4 x test device: dist.zero 0 (DDP"));
  CHECK_THAT(text, FP8T_CONTAINS("verdict: fits"));
  CHECK(text.find("levers") == std::string::npos);  // levers only when it does not fit
  CHECK_THAT(text, FP8T_CONTAINS("tight"));  // above 0.8 of the device: the measured gaps reach 26%
  CHECK(format_memory_plan(plan_memory(c, PlanTarget{4, 2 * need, "d"})).find("tight") == std::string::npos);
  const MemoryPlan short_by_one = plan_memory(c, PlanTarget{4, need - 1, "test device"});
  CHECK_FALSE(short_by_one.fits);
  CHECK_THAT(format_memory_plan(short_by_one), FP8T_CONTAINS("verdict: does not fit"));
  CHECK_THAT(format_memory_plan(short_by_one), FP8T_CONTAINS("levers, each alone"));
}

TEST_CASE("memory plan: each lever is the estimate again with one change, and says whether that fits", "[plan]") {
  ExperimentConfig c;  // fp32, DDP, FP32 moments, micro-batch 16
  const double need = total(c, 4);
  const MemoryPlan plan = plan_memory(c, PlanTarget{4, need - 1, "d"});
  for (const char* setting :
       {"dist.zero 1", "dist.zero 3", "train.recompute mlp", "train.recompute block", "train.moments_dtype bf16"}) {
    INFO(setting);
    REQUIRE(find_lever(plan, setting) != nullptr);
    const Lever& l = *find_lever(plan, setting);
    CHECK(l.saved_bytes == need - l.total_bytes);
    CHECK(l.saved_bytes > 0);
    CHECK(l.fits);  // a byte short: every saving is enough
    CHECK_FALSE(l.cost.empty());
  }
  ExperimentConfig zero3 = c;
  zero3.dist.zero = ZeroStage::kFull;
  CHECK(find_lever(plan, "dist.zero 3")->total_bytes == total(zero3, 4));
  ExperimentConfig bf16 = c;
  bf16.train.moments_dtype = MomentsDtype::kBf16;  // 4 bytes/parameter less, all of them on every rank (DDP)
  CHECK(find_lever(plan, "train.moments_dtype bf16")->saved_bytes == 4.0 * plan.estimate.parameters);
  CHECK(find_lever(plan, "train.recompute casts") == nullptr);  // fp8 only
  // With 2 layers, attention keeps d less per layer and token but recomputes 3d + 2ff once: no saving.
  CHECK(find_lever(plan, "train.recompute attention") == nullptr);
  CHECK_FALSE(plan.together.has_value());
  // DDP has no "more ranks" lever: every rank holds everything.
  for (const Lever& l : plan.levers) CHECK(l.setting.find("ranks") == std::string::npos);
}

TEST_CASE("memory plan: the micro-batch lever halves until the config fits, the ranks lever doubles", "[plan]") {
  ExperimentConfig c;
  c.train.micro_batch_size = 16;
  c.train.grad_accum_steps = 2;
  ExperimentConfig four = c;
  four.train.micro_batch_size = 4;
  const double capacity = total(four, 1);  // micro-batch 4 fits, 8 does not
  const MemoryPlan plan = plan_memory(c, PlanTarget{1, capacity, "d"});
  REQUIRE_FALSE(plan.fits);
  const Lever* micro = find_lever(plan, "train.micro_batch_size 4 (train.grad_accum_steps 8)");  // 16 x 2 = 4 x 8
  REQUIRE(micro != nullptr);
  CHECK(micro->fits);
  // One process: the ZeRO levers are priced on 2 ranks.
  CHECK(find_lever(plan, "dist.zero 1 on 2 ranks") != nullptr);

  ExperimentConfig sharded;
  sharded.dist.zero = ZeroStage::kFull;
  const MemoryPlan on_two = plan_memory(sharded, PlanTarget{2, total(sharded, 8), "d"});
  REQUIRE_FALSE(on_two.fits);
  const Lever* ranks = find_lever(on_two, "8 ranks");
  REQUIRE(ranks != nullptr);
  CHECK(ranks->fits);
  CHECK(ranks->total_bytes == total(sharded, 8));
  CHECK(find_lever(on_two, "dist.prefetch 0") != nullptr);
}

TEST_CASE("memory plan: when no lever alone fits, all of them together are priced", "[plan]") {
  ExperimentConfig c;
  c.train.micro_batch_size = 2;
  ExperimentConfig strongest = c;
  strongest.dist.zero = ZeroStage::kFull;
  strongest.train.recompute = Recompute::kBlock;
  strongest.train.moments_dtype = MomentsDtype::kBf16;
  strongest.train.micro_batch_size = 1;
  strongest.train.grad_accum_steps = 2;
  const double capacity = total(strongest, 2);
  const MemoryPlan plan = plan_memory(c, PlanTarget{2, capacity, "d"});
  for (const Lever& l : plan.levers) {
    INFO(l.setting);
    CHECK_FALSE(l.fits);
  }
  REQUIRE(plan.together.has_value());
  CHECK(plan.together->fits);
  CHECK(plan.together->total_bytes == capacity);
  CHECK_THAT(format_levers(plan), FP8T_CONTAINS("all together: dist.zero 3, train.recompute block"));
}

TEST_CASE("memory plan: a shard group that does not divide the ranks is bad input; no fit is exit 2", "[plan]") {
  ExperimentConfig c;
  c.dist.zero = ZeroStage::kFull;
  c.dist.shard_group_size = 3;
  try {
    plan_memory(c, PlanTarget{8, 1e12, "d"});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK_THAT(std::string(e.what()), FP8T_CONTAINS("dist.shard_group_size 3 does not divide the 8 ranks"));
  }
  c.dist.shard_group_size = 4;
  CHECK(plan_memory(c, PlanTarget{8, 1e12, "d"}).estimate.shard_ranks == 4);
  std::ostringstream out;
  try {
    print_memory_plan(c, PlanTarget{8, 1.0, "1-byte devices"}, out);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK_THAT(std::string(e.what()), FP8T_CONTAINS("does not fit on 8 x 1-byte devices"));
  }
  CHECK_THAT(out.str(), FP8T_CONTAINS("verdict: does not fit"));  // the table came first
  std::ostringstream fits;
  REQUIRE_NOTHROW(print_memory_plan(c, PlanTarget{8, 1e12, "d"}, fits));
  CHECK_THAT(fits.str(), FP8T_CONTAINS("verdict: fits"));
}
