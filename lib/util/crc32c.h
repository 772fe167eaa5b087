// CRC32C (Castagnoli, the iSCSI / ext4 / RFC 3720 checksum), streamed: used to detect bit rot
// and partial writes in checkpoint files. SSE4.2's crc32 instruction when the CPU has it, a
// table otherwise; both give the same value (tests/util/test_crc32c.cpp checks RFC 3720's
// vectors).
#pragma once

#include <cstddef>  // size_t
#include <cstdint>  // uint32_t

namespace fp8t {

// Continues a CRC32C over `n` bytes: start with crc = 0, feed chunks in order; the value after
// the last chunk is the CRC32C of their concatenation (crc32c("123456789") == 0xE3069283).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// The table implementation alone (what crc32c_extend uses without SSE4.2), for tests.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

}  // namespace fp8t
