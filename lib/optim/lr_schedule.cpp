#include "lib/optim/lr_schedule.h"

#include <algorithm>  // std::clamp
#include <cmath>      // std::cos
#include <numbers>    // std::numbers::pi

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::optim {

double learning_rate(const TrainSection& t, int64_t step) {
  FP8T_CHECK(step >= 0, "learning_rate: step must be >= 0, got ", step);
  if (step < t.warmup_steps) {
    return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  }
  const int64_t decay_steps = t.steps - 1 - std::max<int64_t>(t.warmup_steps, 0);
  const double p =
      decay_steps <= 0
          ? 1.0
          : std::clamp(static_cast<double>(step - std::max<int64_t>(t.warmup_steps, 0)) /
                           static_cast<double>(decay_steps),
                       0.0, 1.0);
  switch (t.schedule) {
    case LrSchedule::kCosine:
      return t.min_lr + (t.lr - t.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    case LrSchedule::kLinear:
      return t.lr + (t.min_lr - t.lr) * p;
    case LrSchedule::kConstant:
      return t.lr;
  }
  FP8T_CHECK(false, "learning_rate: unknown schedule ", static_cast<int>(t.schedule));
  return t.lr;
}

}  // namespace fp8t::optim
