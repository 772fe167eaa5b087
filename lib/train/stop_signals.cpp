#include "lib/train/stop_signals.h"

#include <unistd.h>  // ::write, ::_exit, STDERR_FILENO

#include <atomic>   // std::atomic
#include <cerrno>   // errno
#include <cstring>  // std::strlen

#include "lib/util/error.h"  // ExitCode, FP8T_THROW

namespace fp8t::train {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free flag");

constexpr int kExitNow = static_cast<int>(ExitCode::kInterrupted);

// Precomputed: the handler may not format.
constexpr const char* kFirst =
    "\nfp8train: stop signal received: the current step finishes, then a checkpoint is saved and the run exits "
    "130 (--resume continues). Send it again to exit now without saving (the previous checkpoint stays).\n";
constexpr const char* kSecond =
    "\nfp8train: second stop signal: exiting now (130) without saving; the previous checkpoint is intact and "
    "--resume continues from it.\n";

// write(2) until done or failed; keeps errno for the interrupted code.
void write_stderr(const char* text) {
  const int saved = errno;
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) break;
    text += n;
    left -= static_cast<size_t>(n);
  }
  errno = saved;
}

extern "C" void on_stop_signal(int sig) {
  if (g_signal.exchange(sig) == 0) {
    write_stderr(kFirst);
    return;
  }
  write_stderr(kSecond);
  ::_exit(kExitNow);
}

}  // namespace

SignalGuard::SignalGuard() {
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a system call the signal interrupts resumes (the step goes on)
  for (size_t i = 0; i < kSignals.size(); ++i) {
    if (::sigaction(kSignals[i], &action, &previous_[i]) != 0) {
      FP8T_THROW(ExitCode::kFailure, "cannot install the handler of signal ", kSignals[i]);
    }
  }
}

SignalGuard::~SignalGuard() {
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
}

bool SignalGuard::received() { return g_signal.load() != 0; }

}  // namespace fp8t::train
