// Peak memory of the process (CPU: max resident set) or of the CUDA caching allocator.
#pragma once

#include <ATen/ATen.h>  // at::Device

#include <cstdint>  // int64_t

namespace fp8t {

int64_t peak_memory_bytes(const at::Device& device);
void reset_peak_memory(const at::Device& device);
// Returns the CUDA caching allocator's unused blocks to the driver (no-op on the CPU), so that a
// following measurement starts from the memory it really needs.
void release_cached_memory(const at::Device& device);

}  // namespace fp8t
