#include "lib/data/counter_rng.h"

#include <cstdint>  // uint64_t
#include <vector>   // std::vector

#include "tests/catch.h"

using fp8t::data::hash_key;
using fp8t::data::KeyedPermutation;

namespace {

// The images of 0 .. n-1.
std::vector<uint64_t> images(uint64_t n, uint64_t key) {
  const KeyedPermutation p(n, key);
  std::vector<uint64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = p(i);
  return out;
}

}  // namespace

TEST_CASE("KeyedPermutation is a bijection of [0, n) for every n, including odd and power-of-two sizes", "[data]") {
  // Sizes around the Feistel domain's edges: 2^(2k) exactly, one more (the domain quadruples),
  // odd, prime, and a GPT-sized epoch of windows.
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 7ull, 16ull, 17ull, 100ull, 1000ull, 4096ull, 4097ull, 65537ull}) {
    INFO("n = " << n);
    const std::vector<uint64_t> image = images(n, hash_key({7, n}));
    std::vector<char> hit(n, 0);
    for (uint64_t v : image) {
      REQUIRE(v < n);
      REQUIRE(hit[v] == 0);
      hit[v] = 1;
    }
  }
}

TEST_CASE("KeyedPermutation is a pure function of (n, key) and shuffles", "[data]") {
  const uint64_t n = 1000;
  REQUIRE(images(n, 1) == images(n, 1));
  const std::vector<uint64_t> a = images(n, 1), b = images(n, 2);
  int same_place = 0, fixed_points = 0, ascending = 0;
  for (uint64_t i = 0; i < n; ++i) {
    same_place += a[i] == b[i];
    fixed_points += a[i] == i;
    if (i > 0) ascending += a[i] > a[i - 1];
  }
  // A uniform permutation has 1 fixed point and 1 agreement with another in expectation, and
  // about half of its neighbours ascending; a sorted or lightly stirred order would not.
  CHECK(same_place <= 8);
  CHECK(fixed_points <= 8);
  CHECK(ascending > 400);
  CHECK(ascending < 600);
}
