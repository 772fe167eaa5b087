#include "lib/optim/lr_schedule.h"

#include <cmath>    // std::cos
#include <numbers>  // std::numbers::pi

#include "lib/util/error.h"
#include "tests/catch.h"

using fp8t::LrSchedule;
using fp8t::TrainSection;
using fp8t::optim::learning_rate;

namespace {

TrainSection section(LrSchedule schedule) {
  TrainSection t;
  t.lr = 1e-3;
  t.min_lr = 1e-4;
  t.warmup_steps = 10;
  t.steps = 111;  // decay over steps 10..110: 100 intervals, p = (step - 10) / 100
  t.schedule = schedule;
  return t;
}

// All values are a handful of double operations: 1e-12 relative is far above their rounding
// error (~1e-16) and far below any formula mistake (off-by-one steps change values by >= 1%).
Approx near(double v) { return Approx(v).epsilon(1e-12).margin(0.0); }

}  // namespace

TEST_CASE("lr warmup is linear from lr/W and reaches lr on step W-1", "[optim]") {
  for (LrSchedule s : {LrSchedule::kCosine, LrSchedule::kLinear, LrSchedule::kConstant}) {
    const TrainSection t = section(s);
    REQUIRE(learning_rate(t, 0) == near(1e-4));
    REQUIRE(learning_rate(t, 4) == near(5e-4));
    REQUIRE(learning_rate(t, 9) == near(1e-3));
  }
}

TEST_CASE("cosine decay runs from lr at step W to min_lr at the last step, then stays",
          "[optim]") {
  const TrainSection t = section(LrSchedule::kCosine);
  REQUIRE(learning_rate(t, 10) == near(1e-3));
  REQUIRE(learning_rate(t, 60) == near(0.5 * (1e-3 + 1e-4)));  // p = 0.5
  const double p = 0.25;
  REQUIRE(learning_rate(t, 35) ==
          near(1e-4 + (1e-3 - 1e-4) * 0.5 * (1.0 + std::cos(std::numbers::pi * p))));
  REQUIRE(learning_rate(t, 110) == near(1e-4));
  REQUIRE(learning_rate(t, 111) == near(1e-4));
  REQUIRE(learning_rate(t, 100000) == near(1e-4));
  for (int64_t s = 11; s <= 110; ++s) REQUIRE(learning_rate(t, s) < learning_rate(t, s - 1));
}

TEST_CASE("linear decay interpolates lr to min_lr", "[optim]") {
  const TrainSection t = section(LrSchedule::kLinear);
  REQUIRE(learning_rate(t, 10) == near(1e-3));
  REQUIRE(learning_rate(t, 35) == near(1e-3 + (1e-4 - 1e-3) * 0.25));
  REQUIRE(learning_rate(t, 110) == near(1e-4));
  REQUIRE(learning_rate(t, 200) == near(1e-4));
}

TEST_CASE("constant schedule keeps lr after warmup", "[optim]") {
  const TrainSection t = section(LrSchedule::kConstant);
  for (int64_t s : {10, 50, 110, 500}) REQUIRE(learning_rate(t, s) == near(1e-3));
}

TEST_CASE("lr schedule edge cases: no warmup, warmup covering the run, bad step", "[optim]") {
  TrainSection t = section(LrSchedule::kCosine);
  t.warmup_steps = 0;
  t.steps = 101;
  REQUIRE(learning_rate(t, 0) == near(1e-3));
  REQUIRE(learning_rate(t, 50) == near(0.5 * (1e-3 + 1e-4)));
  REQUIRE(learning_rate(t, 100) == near(1e-4));

  // Warmup as long as the run: the last step is still warmup; afterwards min_lr.
  t.warmup_steps = 5;
  t.steps = 5;
  REQUIRE(learning_rate(t, 4) == near(1e-3));
  REQUIRE(learning_rate(t, 5) == near(1e-4));

  // A single step run without warmup: decay has no length, the only step gets min_lr.
  t.warmup_steps = 0;
  t.steps = 1;
  REQUIRE(learning_rate(t, 0) == near(1e-4));

  REQUIRE_THROWS_AS(learning_rate(t, -1), fp8t::Error);
}
