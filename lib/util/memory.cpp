#include "lib/util/memory.h"

#include <sys/resource.h>  // getrusage

#if defined(FP8T_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>  // getDeviceStats, resetPeakStats
#endif

namespace fp8t {

int64_t peak_memory_bytes(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    return stats.allocated_bytes[0].peak;  // [0]: all pools
  }
#endif
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void reset_peak_memory(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
}

void release_cached_memory(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

}  // namespace fp8t
