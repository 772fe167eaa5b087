// A CPU allocation probe for tests that count the bytes a model keeps between its forward and its
// backward (train.recompute): install it with
//   c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, probe);
// and it sums what the CPU allocator hands out and takes back on this thread (the CPU backward
// runs on the calling thread): `live` now and its `peak`.
#pragma once

#include <c10/core/Allocator.h>            // c10::MemoryReportingInfoBase
#include <c10/util/ThreadLocalDebugInfo.h>  // c10::DebugInfoGuard (for the users)

#include <algorithm>  // std::max
#include <cstdint>    // int64_t
#include <mutex>      // std::mutex

namespace fp8t {
namespace test {

class CpuMemoryProbe : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void*, int64_t bytes, size_t, size_t, c10::Device device) override {
    if (!device.is_cpu()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  bool memoryProfilingEnabled() const override { return true; }
  int64_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

 private:
  std::mutex mutex_;
  int64_t live_ = 0, peak_ = 0;
};

}  // namespace test
}  // namespace fp8t
