#include "lib/util/crc32c.h"

#include <array>    // std::array
#include <cstring>  // std::memcpy

#if defined(__x86_64__)
#include <nmmintrin.h>  // _mm_crc32_u64, _mm_crc32_u8 (SSE4.2)
#endif

namespace fp8t {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;  // Castagnoli polynomial 0x1EDC6F41, bit-reversed

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[i] = c;
  }
  return t;
}

// Byte at a time; crc is the internal (inverted) state.
uint32_t extend_table(uint32_t crc, const unsigned char* p, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const unsigned char* p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // unaligned load
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (have_sse42()) return ~extend_sse42(crc, p, n);
#endif
  return ~extend_table(crc, p, n);
}

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  return ~extend_table(~crc, static_cast<const unsigned char*>(data), n);
}

}  // namespace fp8t
