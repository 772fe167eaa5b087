// Where the parameters of one shard space (a group of one ZeRO-3 unit, lib/dist/sharded_unit.h)
// sit in a flat buffer that `world` ranks split into equal contiguous shards: rank r owns the
// buffer's elements [r * shard_numel, (r + 1) * shard_numel).
//
// Every parameter is contiguous in the buffer (its gradient is a view of the gradient buffer, so
// autograd accumulates in place), in the order given. A parameter may carry a band: a number of
// elements that must stay on one rank (the block recipe's 128 rows of a weight, whose 128x128
// block scales are computed where the rows live). It then starts on a multiple of its band, and
// wherever a shard boundary falls inside it, that boundary is a whole number of bands from its
// start; a parameter that would break the rule starts at the boundary instead, and the shard
// grows until everything fits. Without bands the parameters follow each other and only the end
// of the buffer is padded (fewer than `world` elements).
#pragma once

#include <cstdint>  // int64_t
#include <vector>   // std::vector

namespace fp8t::dist {

struct ShardLayout {
  std::vector<int64_t> offsets;  // per parameter: its first element in the buffer
  std::vector<int64_t> numels;   // per parameter
  int64_t shard_numel = 0;       // elements per rank
  int world = 1;

  int64_t numel() const { return shard_numel * world; }
  // Elements of the buffer that belong to no parameter (the padding and the gaps before bands).
  int64_t padding() const;

  // The part of parameter k that rank `rank` owns: elements [begin, begin + length) of the
  // flattened parameter, found at `shard_offset` in the rank's shard. length 0: none.
  struct Part {
    int64_t begin = 0;
    int64_t length = 0;
    int64_t shard_offset = 0;
  };
  Part part(size_t k, int rank) const;
};

// `bands`: per parameter, the elements of one band (0 or 1: none; else the parameter's numel
// need not be a multiple of it: its last band may be shorter). world >= 1.
ShardLayout make_shard_layout(const std::vector<int64_t>& numels, const std::vector<int64_t>& bands, int world);

}  // namespace fp8t::dist
