// The FP8 health test of one element (recipe.stats), written once for host and device: the CPU
// emulation (cpu_backend.cpp) and the statistics kernel (kernels/saturation.cu) both count with
// these, so "saturates" and "flushes to zero" mean the same on both sides.
//
// Plain C++ (no LibTorch): kernels/ include it.
#pragma once

#include <cmath>    // fabsf (host; nvcc provides the device one)
#include <cstdint>  // uint8_t

#include "lib/numerics/format.h"  // FP8T_HOST_DEVICE

namespace fp8t {
namespace fp8 {

// |x * scale| reaches the format's largest finite value: the cast clips it (or it was +-inf).
// A NaN never counts.
FP8T_HOST_DEVICE bool saturates(float scaled, float fp8_max) { return fabsf(scaled) >= fp8_max; }

// A nonzero x whose code (of x * scale) is +-0: the value is lost to underflow.
FP8T_HOST_DEVICE bool flushes_to_zero(float x, uint8_t code) { return x != 0.0f && (code & 0x7fu) == 0; }

}  // namespace fp8
}  // namespace fp8t
