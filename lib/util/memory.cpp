#include "lib/util/memory.h"

#include <malloc.h>        // malloc_trim
#include <sys/resource.h>  // getrusage

#include <cstdio>   // std::FILE, std::fopen
#include <cstring>  // std::strncmp

#if defined(FP8T_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>  // getDeviceStats, resetPeakStats
#endif

namespace fp8t {
namespace {

// A "Vm...:" line of /proc/self/status in bytes (the file says KiB); -1 when it cannot be read.
// VmHWM is the peak resident set, which writing 5 to /proc/self/clear_refs resets (Linux 4.0+).
int64_t proc_status_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && std::sscanf(line + n, "%lld", &kib) == 1) break;
  }
  std::fclose(f);
  return kib < 0 ? -1 : static_cast<int64_t>(kib) * 1024;
}

}  // namespace

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
  if (const int64_t peak = proc_status_bytes("VmHWM:"); peak > 0) return peak;
  struct rusage usage {};  // no /proc: the process-lifetime maximum
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t resident_memory_bytes() {
  const int64_t now = proc_status_bytes("VmRSS:");
  return now > 0 ? now : 0;
}

bool reset_cpu_peak_memory() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

void reset_peak_memory(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(allocator_device(device));
    return;
  }
#endif
  (void)reset_cpu_peak_memory();  // without /proc the CPU peak stays the process-lifetime maximum
}

void release_cached_memory(const at::Device& device) {
#if defined(FP8T_WITH_CUDA)
  if (device.is_cuda()) {
    (void)allocator_device(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
    return;
  }
#endif
  // The heap pages malloc keeps after free() (they count in the resident set) go back to the OS.
  (void)malloc_trim(0);
}

}  // namespace fp8t
