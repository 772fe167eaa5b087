#include "lib/util/memory.h"

#include <sys/resource.h>  // getrusage

#if defined(FP8T_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>  // getDeviceStats, resetPeakStats
#endif

namespace fp8t {

#if defined(FP8T_WITH_CUDA)
namespace {
// The caching allocator rejects queries for a device it has not allocated on yet.
int allocator_device(const at::Device& device) {
  (void)at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
  return device.index() < 0 ? 0 : device.index();
}
}  // namespace
#endif

int64_t peak_memory_bytes(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(allocator_device(device));
    return stats.allocated_bytes[0].peak;  // [0]: all pools
  }
#endif
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void reset_peak_memory(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(allocator_device(device));
#endif
}

void release_cached_memory(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) {
    (void)allocator_device(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#endif
}

}  // namespace fp8t
