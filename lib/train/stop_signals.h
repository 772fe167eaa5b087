// What SIGINT, SIGTERM, SIGHUP and SIGQUIT do during a training run (README "Exit codes"):
//
//   first signal   recorded: the loop finishes the current step, saves a checkpoint and the run
//                  exits kInterrupted (130) with summary.json status "interrupted"; a line on
//                  stderr says so and how to stop at once.
//   second signal  the handler itself ends the process: it writes one precomputed line to stderr
//                  and calls _exit(130). A LibTorch op cannot be cancelled, and a step may take
//                  minutes (model.seq_len 65536 on the CPU), so nothing waits for the step. No
//                  checkpoint is written; the previous one is intact (checkpoints are written to a
//                  temporary name and renamed, lib/run/run_dir.h; --resume deletes the leftover of
//                  a write that was cut off) and the run folder's flock is released with the
//                  process's descriptors, so --resume can open the folder at once.
//
// The handler only touches a lock-free atomic and calls write(2) and _exit(2), all
// async-signal-safe. A data-parallel job's ranks agree on a first signal at the next log step
// (lib/train/training_loop.cpp); a second one ends the rank that receives it.
#pragma once

#include <signal.h>  // struct sigaction, SIGINT, SIGTERM, SIGHUP, SIGQUIT

#include <array>  // std::array

namespace fp8t::train {

// Installs the handlers and restores the previous ones on destruction. run_training installs it
// before the run folder is written.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  // Whether a stop signal arrived since the guard was installed.
  static bool received();

  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

 private:
  std::array<struct sigaction, 4> previous_{};
};

}  // namespace fp8t::train
