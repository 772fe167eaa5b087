// lib/util/memory.*: peak memory as reported in summary.json and by `fp8train bench` (CPU: the
// peak resident set since the last reset, so that each bench row has its own).
#include "lib/util/memory.h"

#include <cstring>  // std::memset
#include <memory>   // std::unique_ptr

#include "tests/catch.h"

TEST_CASE("CPU peak memory covers a freshly touched allocation, and a reset starts a new peak", "[util]") {
  const at::Device cpu(at::kCPU);
  if (!fp8t::reset_cpu_peak_memory()) SKIP("this kernel cannot reset the peak resident set (/proc/self/clear_refs)");
  const int64_t before = fp8t::peak_memory_bytes(cpu);
  REQUIRE(before > 0);
  // 256 MiB written page by page: the resident set, and so its peak, must grow by most of it
  // (the tolerance allows for pages that were already resident).
  const size_t bytes = size_t{256} << 20;
  {
    auto block = std::make_unique<char[]>(bytes);
    std::memset(block.get(), 1, bytes);
    REQUIRE(block[bytes - 1] == 1);
    REQUIRE(fp8t::peak_memory_bytes(cpu) >= before + static_cast<int64_t>(bytes / 2));
  }
  // Freed (a block this large is mmap'ed and unmapped by free) and trimmed: after a reset the
  // peak is the resident set of now, far below the 256 MiB (a process-lifetime maximum, what
  // getrusage reports, could never fall).
  fp8t::release_cached_memory(cpu);
  REQUIRE(fp8t::reset_cpu_peak_memory());
  const int64_t after_reset = fp8t::peak_memory_bytes(cpu);
  REQUIRE(after_reset < before + static_cast<int64_t>(bytes / 4));
}
