#include "lib/data/markov_chain.h"

#include <algorithm>  // std::upper_bound, std::min, std::swap
#include <cmath>      // std::log, std::abs, std::pow
#include <numeric>    // std::iota

#include "lib/data/counter_rng.h"  // SplitMix64, hash_key, Stream
#include "lib/util/error.h"        // FP8T_CHECK

namespace fp8t::data {

MarkovChain MarkovChain::random(int64_t vocab_size, uint64_t seed) {
  FP8T_CHECK(vocab_size >= 2, "MarkovChain needs a vocabulary of at least 2 tokens, got ", vocab_size);
  MarkovChain chain;
  chain.vocab_size_ = vocab_size;
  const int64_t v = vocab_size;
  chain.next_.assign(v * kMaxSuccessors, 0);
  chain.cumulative_.assign(v * kMaxSuccessors, 1.0);
  chain.counts_.assign(v, 0);
  SplitMix64 rng(hash_key({seed, static_cast<uint64_t>(Stream::kChain), static_cast<uint64_t>(v)}));

  // A random cyclic order of all tokens; each token's successors include its neighbour on the
  // cycle, which makes the chain irreducible (one stationary distribution, every token seen).
  std::vector<int64_t> order(v);
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = v - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<int64_t> cycle_next(v);
  for (int64_t i = 0; i < v; ++i) cycle_next[order[i]] = order[(i + 1) % v];

  for (int64_t t = 0; t < v; ++t) {
    const int count = static_cast<int>(std::min<int64_t>(
        v, kMinSuccessors + static_cast<int64_t>(rng.below(kMaxSuccessors - kMinSuccessors + 1))));
    int64_t* succ = &chain.next_[t * kMaxSuccessors];
    succ[0] = cycle_next[t];
    for (int k = 1; k < count; ++k) {
      int64_t candidate = 0;
      bool fresh = false;
      while (!fresh) {  // distinct successors; terminates because count <= v
        candidate = static_cast<int64_t>(rng.below(v));
        fresh = std::find(succ, succ + k, candidate) == succ + k;
      }
      succ[k] = candidate;
    }
    // Shuffle so that the cycle neighbour is not always the likeliest successor.
    for (int k = count - 1; k > 0; --k) std::swap(succ[k], succ[rng.below(k + 1)]);
    // Geometric weights ratio^k with ratio in [0.25, 0.6): skewed but never negligible.
    const double ratio = 0.25 + 0.35 * rng.uniform();
    double total = 0.0;
    double weights[kMaxSuccessors];
    for (int k = 0; k < count; ++k) total += (weights[k] = std::pow(ratio, k));
    double* cum = &chain.cumulative_[t * kMaxSuccessors];
    double acc = 0.0;
    for (int k = 0; k < count; ++k) cum[k] = (acc += weights[k] / total);
    for (int k = count - 1; k < kMaxSuccessors; ++k) cum[k] = 1.0;
    chain.counts_[t] = count;
  }

  // Stationary distribution: power iteration on the lazy chain from the uniform distribution.
  std::vector<double> pi(v, 1.0 / static_cast<double>(v)), step(v);
  constexpr int kMaxIterations = 100'000;
  constexpr double kTolerance = 1e-13;  // L1 change per iteration: far below what the entropy needs
  bool converged = false;
  for (int it = 0; it < kMaxIterations && !converged; ++it) {
    for (int64_t i = 0; i < v; ++i) step[i] = 0.5 * pi[i];
    for (int64_t i = 0; i < v; ++i) {
      for (int k = 0; k < chain.counts_[i]; ++k) {
        step[chain.next_[i * kMaxSuccessors + k]] += 0.5 * pi[i] * chain.probability_slot(i, k);
      }
    }
    double total = 0.0, change = 0.0;
    for (int64_t i = 0; i < v; ++i) total += step[i];
    for (int64_t i = 0; i < v; ++i) {
      step[i] /= total;  // keeps rounding drift from accumulating
      change += std::abs(step[i] - pi[i]);
    }
    pi.swap(step);
    converged = change < kTolerance;
  }
  FP8T_CHECK(converged, "stationary distribution of the synthetic chain did not converge (vocab ", v, ")");
  chain.stationary_ = pi;
  chain.stationary_cumulative_.resize(v);
  double acc = 0.0;
  for (int64_t i = 0; i < v; ++i) chain.stationary_cumulative_[i] = (acc += pi[i]);
  chain.stationary_cumulative_[v - 1] = 1.0;

  double entropy = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    for (int k = 0; k < chain.counts_[i]; ++k) {
      const double p = chain.probability_slot(i, k);
      entropy -= pi[i] * p * std::log(p);
    }
  }
  chain.entropy_rate_ = entropy;
  return chain;
}

double MarkovChain::probability_slot(int64_t from, int slot) const {
  const double* cum = &cumulative_[from * kMaxSuccessors];
  return slot == 0 ? cum[0] : cum[slot] - cum[slot - 1];
}

double MarkovChain::probability(int64_t from, int64_t to) const {
  for (int k = 0; k < counts_[from]; ++k) {
    if (next_[from * kMaxSuccessors + k] == to) return probability_slot(from, k);
  }
  return 0.0;
}

void MarkovChain::sample_window(uint64_t key, int64_t length, int64_t* out) const {
  if (length <= 0) return;
  SplitMix64 rng(key);
  const double u0 = rng.uniform();
  int64_t token = std::upper_bound(stationary_cumulative_.begin(), stationary_cumulative_.end(), u0) -
                  stationary_cumulative_.begin();
  token = std::min(token, vocab_size_ - 1);
  out[0] = token;
  for (int64_t t = 1; t < length; ++t) {
    const double u = rng.uniform();
    const double* cum = &cumulative_[token * kMaxSuccessors];
    int k = 0;
    while (u >= cum[k]) ++k;  // cum[kMaxSuccessors - 1] == 1.0 > u stops the scan
    token = next_[token * kMaxSuccessors + k];
    out[t] = token;
  }
}

}  // namespace fp8t::data
