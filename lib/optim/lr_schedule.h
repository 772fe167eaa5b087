// Learning-rate schedule: linear warmup, then cosine / linear / constant decay.
//
// With lr = train.lr, min_lr = train.min_lr, W = train.warmup_steps, N = train.steps and a
// 0-based optimizer step s:
//
//   s <  W:   lr * (s + 1) / W                          (reaches lr at s = W - 1)
//   s >= W:   p = clamp((s - W) / (N - 1 - W), 0, 1)    (p = 1 when N - 1 - W <= 0)
//             cosine:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * p))
//             linear:   lr + (min_lr - lr) * p
//             constant: lr
//
// So the decay starts at lr on step W and reaches min_lr on the last step s = N - 1; steps
// beyond N - 1 stay at min_lr (cosine, linear).
#pragma once

#include <cstdint>  // int64_t

#include "lib/config/experiment.h"  // TrainSection

namespace fp8t::optim {

// The learning rate for 0-based step `step` (>= 0), see the formula above.
double learning_rate(const TrainSection& t, int64_t step);

}  // namespace fp8t::optim
