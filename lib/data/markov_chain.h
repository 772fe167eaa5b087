// The synthetic data source: a random sparse first-order Markov chain over the vocabulary.
//
// Each token has 2-4 successors with skewed (geometric) probabilities, so a small GPT learns
// the table within a few hundred steps, and the best achievable loss is known exactly: the
// chain's entropy rate H = sum_i pi_i * H(P[i, :]) (pi the stationary distribution). Windows
// start from pi, so every target position of a window has exactly that conditional entropy.
//
// Windows are generated on the fly from a key (see counter_rng.h): no storage, exact resume.
#pragma once

#include <cstdint>  // int64_t, uint64_t
#include <vector>   // std::vector

namespace fp8t::data {

class MarkovChain {
 public:
  static constexpr int kMinSuccessors = 2;
  static constexpr int kMaxSuccessors = 4;

  // The chain is a pure function of (vocab_size, seed). vocab_size >= 2.
  static MarkovChain random(int64_t vocab_size, uint64_t seed);

  int64_t vocab_size() const { return vocab_size_; }
  // Transition probability P[from, to] (0 for non-successors).
  double probability(int64_t from, int64_t to) const;
  int successor_count(int64_t token) const { return counts_[token]; }
  // Stationary distribution, found by power iteration on the lazy chain (P + I) / 2, which has
  // the same fixed point and converges for every irreducible chain, periodic or not.
  const std::vector<double>& stationary() const { return stationary_; }
  // Entropy rate in nats: the loss floor of next-token prediction on this chain's windows.
  double entropy_rate_nats() const { return entropy_rate_; }

  // Writes tokens x_0 .. x_{length-1} of the window identified by `key`: x_0 ~ pi, then
  // x_{t+1} ~ P[x_t, :]. `out` has room for `length` values.
  void sample_window(uint64_t key, int64_t length, int64_t* out) const;

 private:
  double probability_slot(int64_t from, int slot) const;

  int64_t vocab_size_ = 0;
  // Successor table, kMaxSuccessors slots per token: successor ids and cumulative
  // probabilities (the last used slot holds exactly 1.0, so a uniform draw always lands).
  std::vector<int64_t> next_;
  std::vector<double> cumulative_;
  std::vector<int> counts_;
  std::vector<double> stationary_;
  std::vector<double> stationary_cumulative_;
  double entropy_rate_ = 0.0;
};

}  // namespace fp8t::data
