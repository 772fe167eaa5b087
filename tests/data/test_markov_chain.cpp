#include "lib/data/markov_chain.h"

#include <cmath>   // std::log, std::isfinite
#include <vector>  // std::vector

#include "lib/data/counter_rng.h"  // hash_key
#include "tests/catch.h"

using fp8t::data::MarkovChain;

TEST_CASE("MarkovChain rows are sparse probability distributions", "[data]") {
  const MarkovChain chain = MarkovChain::random(64, 1337);
  for (int64_t from = 0; from < 64; ++from) {
    double total = 0.0;
    int nonzero = 0;
    for (int64_t to = 0; to < 64; ++to) {
      const double p = chain.probability(from, to);
      REQUIRE(p >= 0.0);
      total += p;
      nonzero += p > 0.0;
    }
    REQUIRE(total == Approx(1.0).margin(1e-12));
    REQUIRE(nonzero == chain.successor_count(from));
    REQUIRE(nonzero >= MarkovChain::kMinSuccessors);
    REQUIRE(nonzero <= MarkovChain::kMaxSuccessors);
  }
}

TEST_CASE("MarkovChain stationary distribution is a fixed point of the chain", "[data]") {
  const MarkovChain chain = MarkovChain::random(64, 7);
  const std::vector<double>& pi = chain.stationary();
  double total = 0.0;
  for (double p : pi) {
    REQUIRE(p > 0.0);  // irreducible: every token has positive mass
    total += p;
  }
  REQUIRE(total == Approx(1.0).margin(1e-12));
  for (int64_t to = 0; to < 64; ++to) {
    double inflow = 0.0;
    for (int64_t from = 0; from < 64; ++from) inflow += pi[from] * chain.probability(from, to);
    // Power iteration stops at an L1 change of 1e-13; 1e-10 leaves room for rounding.
    REQUIRE(inflow == Approx(pi[to]).margin(1e-10));
  }
}

TEST_CASE("MarkovChain is a function of the seed and the walk a function of the key", "[data]") {
  const MarkovChain a = MarkovChain::random(32, 5), b = MarkovChain::random(32, 5),
                    c = MarkovChain::random(32, 6);
  REQUIRE(a.entropy_rate_nats() == b.entropy_rate_nats());
  REQUIRE(a.entropy_rate_nats() != c.entropy_rate_nats());
  std::vector<int64_t> wa(100), wb(100), wc(100);
  a.sample_window(fp8t::data::hash_key({1, 2}), 100, wa.data());
  b.sample_window(fp8t::data::hash_key({1, 2}), 100, wb.data());
  a.sample_window(fp8t::data::hash_key({1, 3}), 100, wc.data());
  REQUIRE(wa == wb);
  REQUIRE(wa != wc);
  for (size_t t = 1; t < wa.size(); ++t) REQUIRE(a.probability(wa[t - 1], wa[t]) > 0.0);
}

TEST_CASE("MarkovChain lockstep rows are the single walks split into inputs and targets", "[data]") {
  const MarkovChain chain = MarkovChain::random(50, 3);
  const int64_t rows = 11, length = 37;  // more rows than lanes, and a partial group
  std::vector<uint64_t> keys(rows);
  for (int64_t r = 0; r < rows; ++r) keys[r] = fp8t::data::hash_key({7, static_cast<uint64_t>(r)});
  std::vector<int64_t> inputs(rows * length), targets(rows * length), walk(length + 1);
  chain.sample_rows(keys.data(), rows, length, inputs.data(), targets.data());
  for (int64_t r = 0; r < rows; ++r) {
    chain.sample_window(keys[r], length + 1, walk.data());
    REQUIRE(std::vector<int64_t>(inputs.begin() + r * length, inputs.begin() + (r + 1) * length) ==
            std::vector<int64_t>(walk.begin(), walk.end() - 1));
    REQUIRE(std::vector<int64_t>(targets.begin() + r * length, targets.begin() + (r + 1) * length) ==
            std::vector<int64_t>(walk.begin() + 1, walk.end()));
  }
}

TEST_CASE("MarkovChain handles the smallest vocabulary and a GPT-2 sized one", "[data]") {
  const MarkovChain tiny = MarkovChain::random(2, 1);
  REQUIRE(std::isfinite(tiny.entropy_rate_nats()));
  REQUIRE(tiny.entropy_rate_nats() > 0.0);
  REQUIRE(tiny.entropy_rate_nats() < std::log(2.0));
  const MarkovChain large = MarkovChain::random(50257, 1);
  REQUIRE(large.entropy_rate_nats() > 0.0);
  REQUIRE(large.entropy_rate_nats() < std::log(double(MarkovChain::kMaxSuccessors)));
}
