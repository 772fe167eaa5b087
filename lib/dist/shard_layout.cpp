#include "lib/dist/shard_layout.h"

#include <algorithm>  // std::max, std::min
#include <numeric>    // std::accumulate

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::dist {

namespace {

int64_t round_up(int64_t x, int64_t m) { return m <= 1 ? x : (x + m - 1) / m * m; }

// Where a parameter of `numel` elements with `band` may start at or after `pos` when shards hold
// `shard` elements: on a multiple of its band, with every shard boundary inside it a whole number
// of bands from its start. -1 when no start satisfies that (the shard is too small for it).
int64_t place(int64_t pos, int64_t numel, int64_t band, int64_t shard) {
  if (band <= 1) return pos;
  int64_t start = round_up(pos, band);
  for (int attempt = 0; attempt < 2; ++attempt) {
    int64_t bad = -1;  // the first boundary that cuts a band
    for (int64_t c = (start / shard + 1) * shard; c < start + numel; c += shard) {
      if ((c - start) % band != 0) {
        bad = c;
        break;
      }
    }
    if (bad < 0) return start;
    start = bad;  // a boundary is a multiple of the band when the shard is; retry from there once
  }
  return -1;
}

// The offsets for shards of `shard` elements, or an empty vector when they do not fit in world shards.
std::vector<int64_t> try_layout(const std::vector<int64_t>& numels, const std::vector<int64_t>& bands, int world,
                                int64_t shard) {
  std::vector<int64_t> offsets;
  int64_t pos = 0;
  for (size_t k = 0; k < numels.size(); ++k) {
    const int64_t at = place(pos, numels[k], bands[k], shard);
    if (at < 0) return {};
    offsets.push_back(at);
    pos = at + numels[k];
  }
  if (pos > shard * world) return {};
  return offsets;
}

}  // namespace

int64_t ShardLayout::padding() const {
  return numel() - std::accumulate(numels.begin(), numels.end(), int64_t{0});
}

ShardLayout::Part ShardLayout::part(size_t k, int rank) const {
  const int64_t lo = static_cast<int64_t>(rank) * shard_numel, hi = lo + shard_numel;
  const int64_t first = std::max(lo, offsets[k]), last = std::min(hi, offsets[k] + numels[k]);
  if (last <= first) return Part{};
  return Part{first - offsets[k], last - first, first - lo};
}

ShardLayout make_shard_layout(const std::vector<int64_t>& numels, const std::vector<int64_t>& bands, int world) {
  FP8T_CHECK(world >= 1 && numels.size() == bands.size(), "make_shard_layout: bad arguments");
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  int64_t step = 0;  // how much a shard grows when a layout does not fit: the smallest band
  for (int64_t b : bands) {
    if (b > 1) step = step == 0 ? b : std::min(step, b);
  }
  ShardLayout layout;
  layout.numels = numels;
  layout.world = world;
  // A shard of at least one element, so that every rank takes part in the collectives.
  for (int64_t shard = std::max<int64_t>(1, (total + world - 1) / world);; shard += std::max<int64_t>(step, 1)) {
    layout.offsets = try_layout(numels, bands, world, shard);
    if (!layout.offsets.empty() || numels.empty()) {
      layout.shard_numel = shard;
      return layout;
    }
  }
}

}  // namespace fp8t::dist
