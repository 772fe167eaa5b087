// Precondition checks of the launchers (the extern "C" functions of kernels/*.cu), in the manner
// of TE's NVTE_CHECK: a failed check returns cudaErrorInvalidValue AND records which check failed,
// so that the host side can name it (fp8t_last_precondition(), kernels/include/fp8t_kernels.h).
//
//   extern "C" cudaError_t fp8t_thing(...) {
//     FP8T_LAUNCHER("fp8t_thing");
//     FP8T_KERNEL_REQUIRE(n >= 0, "n must not be negative");
//     ...
//
// Only static strings are recorded: a launch that passes its checks costs one thread-local write.
#pragma once

#include <cuda_runtime.h>  // cudaError_t
#include <stdint.h>        // uintptr_t

#include "fp8t_kernels.h"  // FP8T_DTYPE_*, FP8T_FORMAT_*

namespace fp8t {
namespace kern {

// The conditions most launchers check.
inline bool valid_dtype(int d) { return d == FP8T_DTYPE_F32 || d == FP8T_DTYPE_BF16; }
inline bool valid_format(int f) { return f == FP8T_FORMAT_E4M3 || f == FP8T_FORMAT_E5M2; }
inline bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Forgets the failure recorded by an earlier call of this thread; returns `launcher`.
const char* begin_launch(const char* launcher);
// Records a failed check (all three are string literals).
void fail_precondition(const char* launcher, const char* message, const char* condition);

}  // namespace kern
}  // namespace fp8t

// First statement of a launcher: names it for the FP8T_KERNEL_REQUIRE checks that follow.
#define FP8T_LAUNCHER(name) const char* const fp8t_launcher_ = ::fp8t::kern::begin_launch(name)

// Returns cudaErrorInvalidValue from the launcher when `cond` is false, recording `message` (what
// the caller got wrong, in words) and the condition's source text.
#define FP8T_KERNEL_REQUIRE(cond, message)                                      \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ::fp8t::kern::fail_precondition(fp8t_launcher_, (message), #cond);        \
      return cudaErrorInvalidValue;                                             \
    }                                                                           \
  } while (0)
