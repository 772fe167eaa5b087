#include "lib/data/markov_chain.h"

#include <algorithm>  // std::upper_bound, std::min, std::max, std::swap, std::find
#include <cmath>      // std::log, std::abs, std::pow, std::llround
#include <limits>     // std::numeric_limits
#include <numeric>    // std::iota

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::data {

namespace {
constexpr double kTwoPow32 = 4294967296.0;
constexpr uint32_t kNoThreshold = std::numeric_limits<uint32_t>::max();
}  // namespace

MarkovChain MarkovChain::random(int64_t vocab_size, uint64_t seed) {
  FP8T_CHECK(vocab_size >= 2 && vocab_size <= std::numeric_limits<int32_t>::max(),
             "MarkovChain needs a vocabulary of 2 to 2^31 - 1 tokens, got ", vocab_size);
  MarkovChain chain;
  chain.vocab_size_ = vocab_size;
  const int64_t v = vocab_size;
  chain.rows_.resize(v);
  SplitMix64 rng(hash_key({seed, static_cast<uint64_t>(Stream::kChain), static_cast<uint64_t>(v)}));

  // A random cyclic order of all tokens; each token's successors include its neighbour on the
  // cycle, which makes the chain irreducible (one stationary distribution, every token seen).
  std::vector<int64_t> order(v);
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = v - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<int64_t> cycle_next(v);
  for (int64_t i = 0; i < v; ++i) cycle_next[order[i]] = order[(i + 1) % v];

  for (int64_t t = 0; t < v; ++t) random_row(chain.rows_[t], v, cycle_next[t], rng);

  const std::vector<double> pi = chain.power_iteration_stationary();
  chain.stationary_ = pi;
  chain.stationary_cumulative_.resize(v);
  double acc = 0.0;
  for (int64_t i = 0; i < v; ++i) chain.stationary_cumulative_[i] = (acc += pi[i]);
  chain.stationary_cumulative_[v - 1] = 1.0;

  chain.entropy_rate_ = chain.entropy_rate_under(pi);
  return chain;
}

void MarkovChain::random_row(Transitions& row, int64_t v, int64_t cycle_next, SplitMix64& rng) {
  const int count = static_cast<int>(std::min<int64_t>(
      v, kMinSuccessors + static_cast<int64_t>(rng.below(kMaxSuccessors - kMinSuccessors + 1))));
  int32_t* succ = row.next;
  succ[0] = static_cast<int32_t>(cycle_next);
  for (int k = 1; k < count; ++k) {
    int32_t candidate = 0;
    bool fresh = false;
    while (!fresh) {  // distinct successors; terminates because count <= v
      candidate = static_cast<int32_t>(rng.below(v));
      fresh = std::find(succ, succ + k, candidate) == succ + k;
    }
    succ[k] = candidate;
  }
  // Shuffle so that the cycle neighbour is not always the likeliest successor.
  for (int k = count - 1; k > 0; --k) std::swap(succ[k], succ[rng.below(k + 1)]);
  for (int k = count; k < kMaxSuccessors; ++k) succ[k] = succ[count - 1];

  // Geometric weights ratio^k with ratio in [0.25, 0.6): skewed but never negligible (the
  // smallest probability is above 0.01). Quantized to 32-bit thresholds, strictly increasing.
  const double ratio = 0.25 + 0.35 * rng.uniform();
  double total = 0.0;
  for (int k = 0; k < count; ++k) total += std::pow(ratio, k);
  double cumulative = 0.0;
  int64_t previous = 0;
  for (int k = 0; k < kMaxSuccessors - 1; ++k) {
    if (k < count - 1) {
      cumulative += std::pow(ratio, k) / total;
      const int64_t threshold = std::max<int64_t>(previous + 1, std::llround(cumulative * kTwoPow32));
      FP8T_CHECK(threshold < static_cast<int64_t>(kNoThreshold), "synthetic chain threshold overflow");
      row.threshold[k] = static_cast<uint32_t>(threshold);
      previous = threshold;
    } else {
      row.threshold[k] = kNoThreshold;
    }
  }
  row.count = static_cast<uint32_t>(count);
}

std::vector<double> MarkovChain::power_iteration_stationary() const {
  const int64_t v = vocab_size_;
  // Stationary distribution: power iteration on the lazy chain from the uniform distribution,
  // over a flat edge list (the inner loop of a 50k-token vocabulary runs a few hundred times).
  std::vector<int32_t> edge_from, edge_to;
  std::vector<double> edge_p;
  for (int64_t i = 0; i < v; ++i) {
    for (int k = 0; k < successor_count(i); ++k) {
      edge_from.push_back(static_cast<int32_t>(i));
      edge_to.push_back(rows_[i].next[k]);
      edge_p.push_back(0.5 * probability_slot(i, k));
    }
  }
  std::vector<double> pi(v, 1.0 / static_cast<double>(v)), next_pi(v);
  constexpr int kMaxIterations = 100'000;
  constexpr double kTolerance = 1e-13;  // L1 change per iteration: far below what the entropy needs
  bool converged = false;
  for (int it = 0; it < kMaxIterations && !converged; ++it) {
    for (int64_t i = 0; i < v; ++i) next_pi[i] = 0.5 * pi[i];
    for (size_t e = 0; e < edge_p.size(); ++e) next_pi[edge_to[e]] += edge_p[e] * pi[edge_from[e]];
    double total = 0.0, change = 0.0;
    for (int64_t i = 0; i < v; ++i) total += next_pi[i];
    for (int64_t i = 0; i < v; ++i) {
      next_pi[i] /= total;  // keeps rounding drift from accumulating
      change += std::abs(next_pi[i] - pi[i]);
    }
    pi.swap(next_pi);
    converged = change < kTolerance;
  }
  FP8T_CHECK(converged, "stationary distribution of the synthetic chain did not converge (vocab ", v, ")");
  return pi;
}

double MarkovChain::entropy_rate_under(const std::vector<double>& pi) const {
  const int64_t v = vocab_size_;
  double entropy = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    for (int k = 0; k < successor_count(i); ++k) {
      const double p = probability_slot(i, k);
      entropy -= pi[i] * p * std::log(p);
    }
  }
  return entropy;
}

double MarkovChain::probability_slot(int64_t from, int slot) const {
  const Transitions& row = rows_[from];
  const double lower = slot == 0 ? 0.0 : static_cast<double>(row.threshold[slot - 1]);
  const double upper =
      slot + 1 == static_cast<int>(row.count) ? kTwoPow32 : static_cast<double>(row.threshold[slot]);
  return (upper - lower) / kTwoPow32;
}

double MarkovChain::probability(int64_t from, int64_t to) const {
  for (int k = 0; k < successor_count(from); ++k) {
    if (rows_[from].next[k] == to) return probability_slot(from, k);
  }
  return 0.0;
}

int64_t MarkovChain::start_token(SplitMix64& rng) const {
  const double u = rng.uniform();
  const auto it = std::upper_bound(stationary_cumulative_.begin(), stationary_cumulative_.end(), u);
  return std::min<int64_t>(it - stationary_cumulative_.begin(), vocab_size_ - 1);
}

void MarkovChain::sample_window(uint64_t key, int64_t length, int64_t* out) const {
  if (length <= 0) return;
  SplitMix64 rng(key);
  int64_t token = start_token(rng);
  out[0] = token;
  for (int64_t t = 1; t < length; ++t) out[t] = token = step(token, rng);
}

void MarkovChain::sample_rows(const uint64_t* keys, int64_t rows, int64_t length, int64_t* inputs,
                              int64_t* targets) const {
  constexpr int kLanes = 8;  // independent walks in flight; enough to overlap cache misses
  if (length <= 0) return;
  for (int64_t first = 0; first < rows; first += kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, rows - first));
    SplitMix64 rng[kLanes];
    int64_t token[kLanes];
    int64_t* in[kLanes];
    int64_t* tgt[kLanes];
    for (int l = 0; l < lanes; ++l) {
      rng[l] = SplitMix64(keys[first + l]);
      token[l] = start_token(rng[l]);
      in[l] = inputs + (first + l) * length;
      tgt[l] = targets + (first + l) * length;
      in[l][0] = token[l];
    }
    for (int64_t t = 0; t + 1 < length; ++t) {
      for (int l = 0; l < lanes; ++l) in[l][t + 1] = tgt[l][t] = token[l] = step(token[l], rng[l]);
    }
    for (int l = 0; l < lanes; ++l) tgt[l][length - 1] = step(token[l], rng[l]);
  }
}

}  // namespace fp8t::data
