// lib/util/memory.*: peak memory as reported in summary.json and by `fp8train bench` (CPU: the
// process's maximum resident set).
#include "lib/util/memory.h"

#include <cstring>  // std::memset
#include <vector>   // std::vector

#include "tests/catch.h"

TEST_CASE("CPU peak memory covers a freshly touched allocation", "[util]") {
  const at::Device cpu(at::kCPU);
  fp8t::reset_peak_memory(cpu);  // a no-op on the CPU (the kernel keeps the maximum)
  const int64_t before = fp8t::peak_memory_bytes(cpu);
  REQUIRE(before > 0);
  // 256 MiB written page by page: the resident set, and so its maximum, must grow by most of it
  // (the tolerance allows for pages that were already resident and then released before).
  const size_t bytes = size_t{256} << 20;
  std::vector<char> block(bytes);
  std::memset(block.data(), 1, bytes);
  const int64_t after = fp8t::peak_memory_bytes(cpu);
  REQUIRE(block[bytes - 1] == 1);
  REQUIRE(after >= before + static_cast<int64_t>(bytes / 2));
  fp8t::release_cached_memory(cpu);  // a no-op on the CPU; must not throw
  REQUIRE(fp8t::peak_memory_bytes(cpu) >= after);  // a maximum never goes down
}
