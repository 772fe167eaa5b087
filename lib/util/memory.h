// Peak memory of the process (CPU: the peak resident set, VmHWM) or of the CUDA caching
// allocator (allocated bytes), since the last reset_peak_memory.
#pragma once

#include <ATen/ATen.h>  // at::Device

#include <cstdint>  // int64_t

namespace fp8t {

// CPU: the resident set's peak, which includes what the process holds anyway (LibTorch's code
// and the memory it keeps, a few hundred MB); CUDA: the peak of the allocated bytes.
int64_t peak_memory_bytes(const at::Device& device);
// Starts a new peak: CUDA: the allocator's peak statistics; CPU: the kernel's VmHWM (Linux,
// /proc/self/clear_refs), so each `bench` row reports its own peak.
void reset_peak_memory(const at::Device& device);
// The CPU half of reset_peak_memory; false when the kernel does not offer it (then the CPU peak
// is the process-lifetime maximum).
bool reset_cpu_peak_memory();
// The process's resident set now (VmRSS; 0 when unknown): the baseline a CPU measurement
// subtracts to count what it allocated itself.
int64_t resident_memory_bytes();
// Returns cached memory so that a following measurement starts from the memory it really needs:
// CUDA: the caching allocator's unused blocks to the driver; CPU: malloc's free heap pages.
void release_cached_memory(const at::Device& device);

}  // namespace fp8t
