#include "lib/util/crc32c.h"

#include <string>  // std::string
#include <vector>  // std::vector

#include "tests/catch.h"

using fp8t::crc32c;
using fp8t::crc32c_extend;
using fp8t::crc32c_extend_portable;

TEST_CASE("crc32c: RFC 3720 test vectors, both implementations", "[util]") {
  const std::string digits = "123456789";
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  std::vector<unsigned char> ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<unsigned char>(i);
    descending[i] = static_cast<unsigned char>(31 - i);
  }
  CHECK(crc32c(digits.data(), digits.size()) == 0xE3069283u);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(crc32c(ascending.data(), ascending.size()) == 0x46DD794Eu);
  CHECK(crc32c(descending.data(), descending.size()) == 0x113FDB5Cu);
  CHECK(crc32c_extend_portable(0, digits.data(), digits.size()) == 0xE3069283u);
  CHECK(crc32c_extend_portable(0, ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(crc32c(nullptr, 0) == 0u);
}

TEST_CASE("crc32c: chunked equals whole, any split, unaligned", "[util]") {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint32_t whole = crc32c(data.data(), data.size());
  CHECK(crc32c_extend_portable(0, data.data(), data.size()) == whole);
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{999}}) {
    INFO("split " << split);
    CHECK(crc32c_extend(crc32c(data.data(), split), data.data() + split, data.size() - split) == whole);
  }
  // One flipped bit changes the value.
  data[500] ^= 0x10;
  CHECK(crc32c(data.data(), data.size()) != whole);
}
