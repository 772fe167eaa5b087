// Counter-based random numbers for the data pipeline.
//
// Every random draw in lib/data/ is a pure function of a key (seed, stream, rank, position,
// row, ...), never of hidden generator state. That makes batches independent of call order,
// lets ranks draw disjoint streams, and makes resume exact: restoring the train position is
// all a checkpoint needs.
#pragma once

#include <bit>               // std::bit_width
#include <cstdint>           // uint64_t
#include <initializer_list>  // std::initializer_list

namespace fp8t::data {

// The splitmix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mixer whose output
// passes BigCrush when fed a counter.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Hashes a sequence of words into one key. Chaining through mix64 (rather than XOR-ing the
// words) keeps (a, b) and (b, a) apart.
constexpr uint64_t hash_key(std::initializer_list<uint64_t> words) {
  uint64_t h = 0x6A09E667F3BCC909ULL;  // sqrt(2) fraction bits: any non-zero start works
  for (uint64_t w : words) h = mix64(h ^ mix64(w + 0x9E3779B97F4A7C15ULL));
  return h;
}

// splitmix64 generator: a Weyl counter through mix64. Seeded from a hash_key, it yields the
// draws of one window or one table.
class SplitMix64 {
 public:
  constexpr SplitMix64() = default;
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}

  constexpr uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return mix64(state_);
  }
  // Uniform in [0, 1) with 53 random bits: exact in a double, so identical on every platform.
  constexpr double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64).
  constexpr uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t state_ = 0;
};

// A bijection of [0, n) that is a pure function of (n, key): the shuffled order of n items
// without a table, so an epoch of 10^8 windows costs no memory and any position is found in
// O(1). A balanced Feistel network on the smallest even number of bits that holds n - 1 (its
// domain is below 4n), cycle-walking the values >= n back into [0, n): fewer than 4 rounds of
// the network per lookup on average. Six rounds: four already make a pseudo-random permutation
// of random round functions (Luby-Rackoff); the two extra ones cost little.
class KeyedPermutation {
 public:
  // 1 <= n <= 2^62.
  constexpr KeyedPermutation(uint64_t n, uint64_t key)
      : n_(n), key_(key), half_bits_(half_bits_for(n)), mask_((uint64_t{1} << half_bits_) - 1) {}

  // The image of i (i < n).
  constexpr uint64_t operator()(uint64_t i) const {
    uint64_t x = encrypt(i);
    while (x >= n_) x = encrypt(x);  // ends: x's cycle under encrypt passes through i < n
    return x;
  }

 private:
  static constexpr int kRounds = 6;
  static constexpr int half_bits_for(uint64_t n) {
    const int bits = n <= 1 ? 2 : static_cast<int>(std::bit_width(n - 1));
    return (bits + 1) / 2;
  }
  constexpr uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & mask_;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t f = mix64(key_ ^ mix64(right + (static_cast<uint64_t>(round) << 56)));
      const uint64_t next = left ^ (f & mask_);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  uint64_t key_;
  int half_bits_;
  uint64_t mask_;
};

// Data streams: one per purpose, so that e.g. validation never reuses training draws.
// kTrainOrder keys the per-epoch shuffle of data.order sequential.
enum class Stream : uint64_t { kChain = 1, kTrain = 2, kVal = 3, kTrainOrder = 4 };

}  // namespace fp8t::data
