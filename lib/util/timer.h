// A small steady-clock stopwatch for step timing, throughput and ETA.
#pragma once

#include <chrono>  // std::chrono::steady_clock

namespace fp8t {

class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;

  Stopwatch() : start_(Clock::now()), lap_(start_) {}

  // Restarts both the total and the lap clock.
  void reset() {
    start_ = Clock::now();
    lap_ = start_;
  }

  // Seconds since construction or the last reset().
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double millis() const { return seconds() * 1e3; }

  // Seconds since the previous lap() (or reset/construction), and starts a new lap.
  double lap() {
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - lap_).count();
    lap_ = now;
    return s;
  }

 private:
  Clock::time_point start_;
  Clock::time_point lap_;
};

}  // namespace fp8t
