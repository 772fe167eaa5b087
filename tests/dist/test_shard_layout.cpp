// lib/dist/shard_layout.h: where a ZeRO-3 group's parameters sit in the buffer the ranks split.
#include "lib/dist/shard_layout.h"

#include <random>  // std::mt19937

#include "tests/catch.h"

using namespace fp8t;

namespace {

// The layout's promises: the parameters in order without overlap inside the buffer; every
// element of every parameter owned by exactly one rank, in one contiguous part; a banded
// parameter's parts start on band boundaries and end on one or at the parameter's end.
void check_layout(const dist::ShardLayout& l, const std::vector<int64_t>& numels, const std::vector<int64_t>& bands) {
  REQUIRE(l.offsets.size() == numels.size());
  int64_t end = 0;
  for (size_t k = 0; k < numels.size(); ++k) {
    INFO("parameter " << k);
    CHECK(l.offsets[k] >= end);
    end = l.offsets[k] + numels[k];
    int64_t owned = 0, next = 0;
    for (int r = 0; r < l.world; ++r) {
      const dist::ShardLayout::Part p = l.part(k, r);
      if (p.length == 0) continue;
      CHECK(p.begin == next);  // in rank order, no gap, no overlap
      next = p.begin + p.length;
      owned += p.length;
      CHECK(p.shard_offset + p.length <= l.shard_numel);
      CHECK(l.offsets[k] + p.begin == static_cast<int64_t>(r) * l.shard_numel + p.shard_offset);
      if (bands[k] > 1) {
        CHECK(p.begin % bands[k] == 0);
        CHECK((next % bands[k] == 0 || next == numels[k]));
      }
    }
    CHECK(owned == numels[k]);
  }
  CHECK(end <= l.numel());
}

}  // namespace

TEST_CASE("shard layout without bands: parameters back to back, the end padded", "[dist]") {
  const dist::ShardLayout l = dist::make_shard_layout({10, 7, 5}, {0, 0, 0}, 4);
  CHECK(l.shard_numel == 6);
  CHECK(l.offsets == std::vector<int64_t>{0, 10, 17});
  CHECK(l.padding() == 2);
  const dist::ShardLayout::Part p = l.part(1, 2);  // rank 2 owns [12, 18): elements 2..6 of parameter 1
  CHECK(p.begin == 2);
  CHECK(p.length == 5);
  CHECK(p.shard_offset == 0);
  CHECK(l.part(2, 0).length == 0);
  check_layout(l, {10, 7, 5}, {0, 0, 0});
}

TEST_CASE("shard layout with 128-row bands: no band straddles two ranks", "[dist]") {
  // Three and two bands of 128 rows x 8 columns on two ranks: the even split (2560 per rank)
  // would cut a band, so the shard grows to 3584 and the second weight starts on rank 1.
  const std::vector<int64_t> numels{3 * 1024, 2 * 1024}, bands{1024, 1024};
  const dist::ShardLayout l = dist::make_shard_layout(numels, bands, 2);
  CHECK(l.shard_numel == 3584);
  CHECK(l.offsets == std::vector<int64_t>{0, 3584});
  check_layout(l, numels, bands);
  // A short last band (100 rows) and a parameter without bands between banded ones.
  const std::vector<int64_t> n2{228 * 16, 50, 256 * 16}, b2{128 * 16, 0, 128 * 16};
  check_layout(dist::make_shard_layout(n2, b2, 3), n2, b2);
}

TEST_CASE("shard layout: random shapes and rank counts keep every promise", "[dist]") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int world = 1 + static_cast<int>(gen() % 8);
    std::vector<int64_t> numels, bands;
    for (int k = 0, n = 1 + static_cast<int>(gen() % 6); k < n; ++k) {
      const bool banded = gen() % 2 == 0;
      const int64_t cols = 16 * (1 + static_cast<int64_t>(gen() % 4));
      numels.push_back(banded ? cols * (1 + static_cast<int64_t>(gen() % 600)) : 1 + static_cast<int64_t>(gen() % 5000));
      bands.push_back(banded ? 128 * cols : 0);
    }
    INFO("trial " << trial << ", world " << world);
    check_layout(dist::make_shard_layout(numels, bands, world), numels, bands);
  }
}
