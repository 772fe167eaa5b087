// The synthetic data source: a random sparse first-order Markov chain over the vocabulary.
//
// Each token has 2-4 successors with skewed (geometric) probabilities, so a small GPT learns
// the table within a few hundred steps, and the best achievable loss is known exactly: the
// chain's entropy rate H = sum_i pi_i * H(P[i, :]) (pi the stationary distribution). Windows
// start from pi, so every target position of a window has exactly that conditional entropy.
//
// Windows are generated on the fly from a key (see counter_rng.h): no storage, exact resume.
#pragma once

#include <cstdint>  // int64_t, uint32_t, uint64_t
#include <vector>   // std::vector

#include "lib/data/counter_rng.h"  // SplitMix64

namespace fp8t::data {

class MarkovChain {
 public:
  static constexpr int kMinSuccessors = 2;
  static constexpr int kMaxSuccessors = 4;

  // The chain is a pure function of (vocab_size, seed). 2 <= vocab_size < 2^31.
  static MarkovChain random(int64_t vocab_size, uint64_t seed);

  int64_t vocab_size() const { return vocab_size_; }
  // Transition probability P[from, to] (0 for non-successors): exactly the probability with
  // which the sampler moves, since both come from the same 32-bit thresholds.
  double probability(int64_t from, int64_t to) const;
  int successor_count(int64_t token) const { return static_cast<int>(rows_[token].count); }
  // Stationary distribution, found by power iteration on the lazy chain (P + I) / 2, which has
  // the same fixed point and converges for every irreducible chain, periodic or not.
  const std::vector<double>& stationary() const { return stationary_; }
  // Entropy rate in nats: the loss floor of next-token prediction on this chain's windows.
  double entropy_rate_nats() const { return entropy_rate_; }

  // Writes tokens x_0 .. x_{length-1} of the window identified by `key`: x_0 ~ pi, then
  // x_{t+1} ~ P[x_t, :].
  void sample_window(uint64_t key, int64_t length, int64_t* out) const;
  // Training pairs for `rows` walks: row r is the walk x_0 .. x_T of keys[r] (as sample_window
  // of length + 1 writes it), split into inputs + r * length <- x_0 .. x_{T-1} and
  // targets + r * length <- x_1 .. x_T.
  // The walks advance in lockstep, so their table look-ups overlap: a single walk is a chain
  // of dependent loads, which for a large vocabulary waits on memory at every step.
  void sample_rows(const uint64_t* keys, int64_t rows, int64_t length, int64_t* inputs,
                   int64_t* targets) const;

 private:
  // One 32-byte record per token, so a step touches a single cache line even when the table
  // (vocab * 32 bytes) outgrows the caches. Successor k is taken for a 32-bit draw u with
  // threshold[k-1] <= u < threshold[k]; the unused thresholds are UINT32_MAX and the unused
  // `next` slots repeat the last successor, so k = (number of thresholds <= u) needs no branch.
  struct alignas(32) Transitions {  // aligned: never straddles two cache lines
    uint32_t threshold[kMaxSuccessors - 1];
    uint32_t count;
    int32_t next[kMaxSuccessors];
  };
  static_assert(sizeof(Transitions) == 32, "two transition records per cache line");

  // The steps of random(): one token's successors and thresholds (drawing from `rng` in a fixed
  // order, so the chain stays a pure function of the seed); the stationary distribution by
  // power iteration; the entropy rate under it.
  static void random_row(Transitions& row, int64_t vocab_size, int64_t cycle_next, SplitMix64& rng);
  std::vector<double> power_iteration_stationary() const;
  double entropy_rate_under(const std::vector<double>& pi) const;

  double probability_slot(int64_t from, int slot) const;
  int64_t start_token(SplitMix64& rng) const;
  int64_t step(int64_t token, SplitMix64& rng) const {
    const Transitions& row = rows_[token];
    const uint32_t u = static_cast<uint32_t>(rng.next() >> 32);
    int k = 0;
    for (int j = 0; j < kMaxSuccessors - 1; ++j) k += u >= row.threshold[j];
    return row.next[k];
  }

  int64_t vocab_size_ = 0;
  std::vector<Transitions> rows_;
  std::vector<double> stationary_;
  std::vector<double> stationary_cumulative_;
  double entropy_rate_ = 0.0;
};

}  // namespace fp8t::data
