// The record behind FP8T_KERNEL_REQUIRE (precondition.cuh) and fp8t_last_precondition().
//
// Per thread, because launchers run on whichever host thread enqueues work (the trainer, the
// autograd engine's worker threads); the text is formatted only when someone asks for it.
#include <stdio.h>  // snprintf

#include "fp8t_kernels.h"     // the C API
#include "precondition.cuh"   // begin_launch, fail_precondition

namespace {

struct FailedCheck {
  const char* launcher = nullptr;  // null: the last call's preconditions held
  const char* message = nullptr;
  const char* condition = nullptr;
};

thread_local FailedCheck last_failure;
thread_local char last_text[512];

}  // namespace

namespace fp8t {
namespace kern {

const char* begin_launch(const char* launcher) {
  last_failure.launcher = nullptr;
  return launcher;
}

void fail_precondition(const char* launcher, const char* message, const char* condition) {
  last_failure = FailedCheck{launcher, message, condition};
}

}  // namespace kern
}  // namespace fp8t

// ---- launchers ------------------------------------------------------------------------------

extern "C" const char* fp8t_last_precondition(void) {
  if (last_failure.launcher == nullptr) return "";
  snprintf(last_text, sizeof(last_text), "%s: %s (failed check: %s)", last_failure.launcher,
           last_failure.message, last_failure.condition);
  return last_text;
}
