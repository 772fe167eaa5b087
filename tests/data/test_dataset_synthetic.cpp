#include <torch/torch.h>

#include <cmath>   // std::log, std::isfinite
#include <vector>  // std::vector

#include "lib/data/dataset.h"
#include "tests/catch.h"

using fp8t::ParallelLayout;
using fp8t::data::Batch;
using fp8t::data::Dataset;

namespace {

fp8t::ModelSection tiny_model(int64_t vocab = 64, int64_t seq_len = 64) {
  fp8t::ModelSection model;
  model.vocab_size = vocab;
  model.seq_len = seq_len;
  return model;
}

Dataset synthetic(uint64_t seed, int rank = 0, int world_size = 1, int64_t vocab = 64, int64_t seq_len = 64) {
  return Dataset::open(fp8t::DataSection{}, tiny_model(vocab, seq_len), seed,
                       ParallelLayout{.rank = rank, .world_size = world_size});
}

bool same(const Batch& a, const Batch& b) {
  return at::equal(a.inputs, b.inputs) && at::equal(a.targets, b.targets);
}

}  // namespace

TEST_CASE("synthetic batches are int64 [B, T] CPU tensors within the vocabulary", "[data]") {
  Dataset data = synthetic(1337);
  const Batch batch = data.next_train(16);
  for (const at::Tensor& t : {batch.inputs, batch.targets}) {
    REQUIRE(t.scalar_type() == at::kLong);
    REQUIRE(t.device().is_cpu());
    REQUIRE(t.is_contiguous());
    REQUIRE(t.sizes() == at::IntArrayRef({16, 64}));
    REQUIRE(t.min().item<int64_t>() >= 0);
    REQUIRE(t.max().item<int64_t>() < 64);
  }
  REQUIRE(data.vocab_size_needed() == 64);
  REQUIRE_THAT(data.describe(), FP8T_CONTAINS("synthetic"));
}

TEST_CASE("synthetic targets are the inputs shifted by one", "[data]") {
  Dataset data = synthetic(3);
  const Batch batch = data.next_train(8);
  using at::indexing::Slice;
  REQUIRE(at::equal(batch.inputs.index({Slice(), Slice(1, at::indexing::None)}),
                    batch.targets.index({Slice(), Slice(at::indexing::None, -1)})));
  const Batch val = data.val_batch(0, 8);
  REQUIRE(at::equal(val.inputs.index({Slice(), Slice(1, at::indexing::None)}),
                    val.targets.index({Slice(), Slice(at::indexing::None, -1)})));
}

TEST_CASE("synthetic data is deterministic in the seed", "[data]") {
  Dataset a = synthetic(42), b = synthetic(42), c = synthetic(43);
  const Batch a0 = a.next_train(4), b0 = b.next_train(4), c0 = c.next_train(4);
  REQUIRE(same(a0, b0));
  REQUIRE_FALSE(same(a0, c0));
  REQUIRE(*a.entropy_floor_nats() == *b.entropy_floor_nats());
  REQUIRE(*a.entropy_floor_nats() != *c.entropy_floor_nats());
  // Consecutive draws differ; the position advances.
  REQUIRE(a.train_position() == 1);
  REQUIRE_FALSE(same(a0, a.next_train(4)));
  REQUIRE(a.train_position() == 2);
}

TEST_CASE("restoring the train position reproduces the batches", "[data]") {
  Dataset original = synthetic(9);
  std::vector<Batch> draws;
  for (int i = 0; i < 5; ++i) draws.push_back(original.next_train(4));
  Dataset resumed = synthetic(9);
  resumed.set_train_position(3);
  REQUIRE(same(resumed.next_train(4), draws[3]));
  REQUIRE(same(resumed.next_train(4), draws[4]));
  resumed.set_train_position(0);
  REQUIRE(same(resumed.next_train(4), draws[0]));
  // A row depends on (position, row) only: not on the batch size, nor on how many threads
  // built the batch (600 x 64 tokens is split into several tasks).
  resumed.set_train_position(2);
  const Batch big = resumed.next_train(600);
  REQUIRE(at::equal(big.inputs.slice(0, 0, 4), draws[2].inputs));
  REQUIRE(at::equal(big.targets.slice(0, 0, 4), draws[2].targets));
  Dataset again = synthetic(9);
  again.set_train_position(2);
  REQUIRE(same(again.next_train(600), big));
}

TEST_CASE("ranks draw different training batches and share the chain", "[data]") {
  Dataset r0 = synthetic(11, 0, 2), r1 = synthetic(11, 1, 2);
  REQUIRE_FALSE(same(r0.next_train(4), r1.next_train(4)));
  REQUIRE(*r0.entropy_floor_nats() == *r1.entropy_floor_nats());
}

TEST_CASE("two ranks of B training rows draw exactly one process's 2B rows", "[data]") {
  // Data-parallel runs must see the same global batches as a single process (lib/dist).
  Dataset whole = synthetic(12, 0, 1), r0 = synthetic(12, 0, 2), r1 = synthetic(12, 1, 2);
  for (int draw = 0; draw < 3; ++draw) {
    const Batch w = whole.next_train(6), a = r0.next_train(3), b = r1.next_train(3);
    REQUIRE(at::equal(at::cat({a.inputs, b.inputs}), w.inputs));
    REQUIRE(at::equal(at::cat({a.targets, b.targets}), w.targets));
  }
}

TEST_CASE("synthetic validation batches are fixed, disjoint from training, sharded by rank", "[data]") {
  Dataset data = synthetic(5);
  const Batch v0 = data.val_batch(0, 4);
  data.next_train(4);
  REQUIRE(same(v0, data.val_batch(0, 4)));  // independent of training progress
  REQUIRE_FALSE(same(v0, data.val_batch(1, 4)));
  Dataset fresh = synthetic(5);
  REQUIRE_FALSE(same(v0, fresh.next_train(4)));

  // Two ranks of 2 rows evaluate exactly the rows one rank of 4 rows evaluates.
  const Batch whole = synthetic(5, 0, 1).val_batch(2, 4);
  const Batch part0 = synthetic(5, 0, 2).val_batch(2, 2), part1 = synthetic(5, 1, 2).val_batch(2, 2);
  REQUIRE(at::equal(at::cat({part0.inputs, part1.inputs}), whole.inputs));
  REQUIRE(at::equal(at::cat({part0.targets, part1.targets}), whole.targets));
}

TEST_CASE("synthetic entropy floor matches a Monte-Carlo estimate from the batches", "[data]") {
  const int64_t vocab = 64;
  Dataset data = synthetic(1337, 0, 1, vocab, 64);
  const double floor = *data.entropy_floor_nats();
  REQUIRE(std::isfinite(floor));
  REQUIRE(floor > 0.0);
  REQUIRE(floor < std::log(double(vocab)));
  // A small GPT must be able to get well under half the uniform loss.
  REQUIRE(floor < 0.5 * std::log(double(vocab)));

  // Plug-in estimate of H(target | input) from bigram counts of 1000 batches x 16 x 64 =
  // 1,024,000 transitions. Its bias is about -(cells - rows) / (2N) ~ -1e-4 nats; its spread,
  // measured over 20 seeds, is ~6e-4 nats (max 1.4e-3). The tolerance of 0.004 nats is ~6 sigma
  // and still catches a floor weighted uniformly instead of by pi (off by 0.0096 for this seed).
  std::vector<double> pair(vocab * vocab, 0.0), first(vocab, 0.0), start(vocab, 0.0);
  double n = 0.0;
  const int batches = 1000;
  for (int i = 0; i < batches; ++i) {
    const Batch b = data.next_train(16);
    const int64_t* in = b.inputs.data_ptr<int64_t>();
    const int64_t* tg = b.targets.data_ptr<int64_t>();
    for (int64_t k = 0; k < b.inputs.numel(); ++k) {
      pair[in[k] * vocab + tg[k]] += 1.0;
      first[in[k]] += 1.0;
      n += 1.0;
    }
    for (int64_t row = 0; row < 16; ++row) start[in[row * 64]] += 1.0;
  }
  double estimate = 0.0;
  for (int64_t a = 0; a < vocab; ++a) {
    for (int64_t c = 0; c < vocab; ++c) {
      const double count = pair[a * vocab + c];
      if (count > 0.0) estimate -= count / n * std::log(count / first[a]);
    }
  }
  INFO("entropy floor " << floor << " nats, Monte-Carlo estimate " << estimate << " nats");
  REQUIRE(estimate == Approx(floor).margin(0.004));

  // Windows start from the stationary distribution, which is what makes the floor exact at
  // every position: the start tokens' frequencies (16,000 draws) must follow the whole-stream
  // frequencies. Sampling noise puts their total variation near 0.025; allow 0.1, while
  // uniform starts would give ~0.3 (the TV between pi and uniform for this seed).
  double tv = 0.0;
  for (int64_t a = 0; a < vocab; ++a) tv += 0.5 * std::abs(start[a] / (batches * 16.0) - first[a] / n);
  INFO("total variation between start-token and stream frequencies: " << tv);
  REQUIRE(tv < 0.1);
}

TEST_CASE("a bigram model learns synthetic data to well under half the uniform loss in 300 steps", "[data]") {
  // The cheapest model that can represent a first-order chain; a 2-layer GPT has it as a
  // sub-circuit (embedding -> unembedding), so this bounds how hard the data is to learn.
  torch::manual_seed(0);
  const int64_t vocab = 64;
  Dataset data = synthetic(1337, 0, 1, vocab, 64);
  torch::Tensor logits_table = torch::zeros({vocab, vocab}, torch::requires_grad());
  torch::optim::Adam optimizer({logits_table}, torch::optim::AdamOptions(3e-2));
  double loss_value = 0.0;
  for (int step = 0; step < 300; ++step) {
    const Batch b = data.next_train(16);
    const torch::Tensor logits = logits_table.index_select(0, b.inputs.reshape(-1));
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, b.targets.reshape(-1));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    loss_value = loss.item<double>();
  }
  const double floor = *data.entropy_floor_nats();
  INFO("loss after 300 steps " << loss_value << ", floor " << floor);
  REQUIRE(loss_value < 0.5 * std::log(double(vocab)));
  REQUIRE(loss_value > floor - 0.1);  // no batch can beat the floor by much (noise ~0.03)
}
