// Launch geometry and attributes the launchers share (host code): the SM count, how many blocks
// of a kernel stay resident, and the opt-in to more dynamic shared memory than the default.
//
// Only included by kernels/*.cu (nvcc); no LibTorch.
#pragma once

#include <cuda_runtime.h>  // cudaOccupancyMaxActiveBlocksPerMultiprocessor, cudaDeviceGetAttribute
#include <stddef.h>        // size_t
#include <stdint.h>        // int64_t

#include <atomic>  // std::atomic

namespace fp8t {
namespace kern {

// SMs of the current device, asked once per device (132 when the device cannot be asked).
inline int sm_count() {
  static std::atomic<int> counts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    (void)cudaGetLastError();
    return 132;
  }
  int c = counts[dev].load(std::memory_order_relaxed);
  if (c == 0) {
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || c <= 0) {
      (void)cudaGetLastError();
      c = 132;
    }
    counts[dev].store(c, std::memory_order_relaxed);
  }
  return c;
}

// Blocks of kKernel (`threads` threads, `dynamic_smem` bytes of dynamic shared memory) that fit on
// the current device at once. The per-SM count depends only on the kernel and its launch shape,
// which are fixed per kernel, so it is asked once per kernel; at least one block per SM.
template <auto kKernel>
int64_t resident_blocks(int threads, size_t dynamic_smem = 0) {
  static const int per_sm = [threads, dynamic_smem] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, threads, dynamic_smem) != cudaSuccess) {
      (void)cudaGetLastError();  // not the launch's error: fall back to one block per SM
      n = 1;
    }
    return n < 1 ? 1 : n;
  }();
  return static_cast<int64_t>(per_sm) * sm_count();
}

// Lets kKernel launch with `bytes` of dynamic shared memory, past the 48 KiB a block gets without
// opting in. A host call, not a stream operation (allowed while a stream is captured into a CUDA
// graph); it applies to the current device, so launchers make it before every launch, and before
// resident_blocks asks for the occupancy at that size.
template <auto kKernel>
cudaError_t allow_dynamic_smem(size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace kern
}  // namespace fp8t
