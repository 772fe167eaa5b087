// lib/dist (communicator + gradient buckets + amax reduction) with two ranks in one process:
// two threads, each with its own TCP-store client and Gloo process group on the CPU. The
// buckets fill through lib/dist/accumulator_hooks.cpp (AccumulatorHooks), as ZeRO-3's units do.
#include "lib/dist/grad_sync.h"

#include <torch/torch.h>  // torch::autograd

#include <algorithm>   // std::none_of
#include <cmath>       // std::isnan, std::sqrt
#include <exception>   // std::exception_ptr
#include <functional>  // std::function
#include <thread>      // std::thread

#include "lib/dist/communicator.h"            // Communicator
#include "lib/fp8/recipes/delayed_scaling.h"  // DelayedScaling
#include "lib/optim/grad_clip.h"              // sharded_grad_norm
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"        // run_ranks

using fp8t::dist::Communicator;
using fp8t::dist::GradientSync;
using fp8t::dist::LaunchInfo;
using fp8t::test::run_ranks;

namespace {

struct TinyNet {
  std::vector<at::Tensor> params;
  explicit TinyNet(int seed) {
    // A generator of its own: the ranks are threads, and the global one is shared.
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    params = {at::randn({32, 24}, gen).requires_grad_(), at::randn({24, 16}, gen).requires_grad_(),
              at::randn({16}, gen).requires_grad_()};
  }
  at::Tensor loss(const at::Tensor& x) const {
    return (at::matmul(at::matmul(x, params[0]).tanh(), params[1]) + params[2]).pow(2).mean();
  }
};

at::Tensor batch_of(int rank, int micro) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(100 * rank + micro + 1);
  return at::randn({8, 32}, gen);
}

}  // namespace

TEST_CASE("gradient buckets are averaged across ranks, launched during the backward", "[dist]") {
  const int world = 2;
  const int micro_batches = 2;
  std::vector<std::vector<at::Tensor>> synced(world), local(world);
  std::vector<int> buckets(world), launched(world);
  std::vector<char> still_views(world);  // not vector<bool>: the ranks are threads writing their own element
  run_ranks(world, std::chrono::seconds(60), [&](int rank, Communicator& comm) {
    REQUIRE(comm.backend_name() == "gloo");
    TinyNet net(7);  // same weights on every rank
    // The gradients this rank would have alone (sum over its micro-batches of loss / n).
    TinyNet ref(7);
    for (int m = 0; m < micro_batches; ++m) (ref.loss(batch_of(rank, m)) / micro_batches).backward();
    for (auto& p : ref.params) local[rank].push_back(p.grad().clone());

    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    GradientSync sync(shared, net.params, /*bucket_bytes=*/1024);  // {bias, w2} and {w1}
    buckets[rank] = sync.num_buckets();
    for (int step = 0; step < 2; ++step) {  // the second step checks that zero_grad resets
      sync.zero_grad();
      for (int m = 0; m < micro_batches; ++m) {
        if (m + 1 == micro_batches) sync.arm();
        (net.loss(batch_of(rank, m)) / micro_batches).backward();
      }
      sync.finish();
    }
    launched[rank] = sync.launched_during_backward();
    for (auto& p : net.params) synced[rank].push_back(p.grad().clone());
    // Grads are still views into the buckets after a zero_grad.
    const void* before = net.params[0].grad().data_ptr();
    sync.zero_grad();
    still_views[rank] = net.params[0].grad().data_ptr() == before && net.params[0].grad().abs().max().item<float>() == 0;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    REQUIRE(buckets[r] >= 2);
    // Every bucket became complete during the last backward, so all launched there.
    REQUIRE(launched[r] == buckets[r]);
    REQUIRE(still_views[r]);
  }
  for (size_t i = 0; i < synced[0].size(); ++i) {
    INFO("parameter " << i);
    // Identical on both ranks (the same sums), and the mean of the ranks' own gradients: the
    // tolerance covers float32 summation order (two micro-batches accumulated, then the sum
    // over ranks, versus the reference's sums).
    REQUIRE(at::equal(synced[0][i], synced[1][i]));
    const at::Tensor expect = (local[0][i] + local[1][i]) / 2;
    REQUIRE(at::allclose(synced[0][i], expect, /*rtol=*/1e-5, /*atol=*/1e-7));
    REQUIRE_FALSE(at::allclose(local[0][i], local[1][i]));  // the ranks' data really differ
  }
}

TEST_CASE("FP8 amaxes are reduced with MAX so that every rank computes the same scales", "[dist]") {
  const int world = 2;
  std::vector<at::Tensor> scales(world);
  run_ranks(world, std::chrono::seconds(60), [&](int rank, Communicator& comm) {
    fp8t::fp8::Recipe recipe;
    recipe.amax_history_len = 4;
    fp8t::fp8::DelayedScaling scaling(recipe);
    scaling.add_slot("a:input", fp8t::fp8::Format::kE4M3);
    scaling.add_slot("a:grad_output", fp8t::fp8::Format::kE5M2);
    scaling.finalize(c10::Device(c10::kCPU));
    scaling.set_amax_reducer([&comm](at::Tensor& row0) { comm.all_reduce(row0, fp8t::dist::ReduceOp::kMax); });
    // Rank 0 saw the larger input amax, rank 1 the larger gradient amax.
    at::Tensor row0 = scaling.amax_history()[0];
    row0.copy_(rank == 0 ? at::tensor({8.0f, 0.5f}) : at::tensor({2.0f, 4.0f}));
    scaling.update();
    scales[rank] = scaling.scale().clone();
  });
  REQUIRE(at::equal(scales[0], scales[1]));
  // scale = fp8_max / amax of the job: 448 / 8 and 57344 / 4 (margin 0), exact in float.
  REQUIRE(scales[0][0].item<float>() == 448.0f / 8.0f);
  REQUIRE(scales[0][1].item<float>() == 57344.0f / 4.0f);
}

TEST_CASE("ZeRO-1 buckets: each rank gets the averaged gradients of its segments, then all the weights", "[dist]") {
  const int world = 2;
  std::vector<std::vector<GradientSync::Segment>> segments(world);
  std::vector<std::vector<at::Tensor>> local(world), synced(world), gathered(world);
  std::vector<at::Tensor> norms(world), nan_norms(world);
  std::vector<int> released(world);  // not vector<bool>: the ranks write their elements concurrently
  run_ranks(world, std::chrono::seconds(60), [&](int rank, Communicator& comm) {
    TinyNet net(7);
    TinyNet ref(7);
    ref.loss(batch_of(rank, 0)).backward();
    for (auto& p : ref.params) local[rank].push_back(p.grad().clone());
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    // 1000 bytes: buckets whose sizes are not multiples of the world size (padding) and
    // parameters split between the ranks.
    GradientSync sync(shared, net.params, /*bucket_bytes=*/1000, /*shard=*/true);
    REQUIRE(sync.sharded());
    sync.zero_grad();
    sync.arm();
    net.loss(batch_of(rank, 0)).backward();
    sync.finish();
    segments[rank] = sync.shard_segments();
    // The full buckets are gone after finish(): the averaged gradients of the owned elements
    // are read from the segments (views into the rank's shards); the rest stays zero here.
    released[rank] = sync.full_bucket_bytes() == 0;
    for (auto& p : net.params) {
      released[rank] = released[rank] && !p.grad().defined();
      synced[rank].push_back(at::zeros_like(p.detach()));
    }
    for (const auto& s : sync.shard_segments()) synced[rank][s.param].view(-1).narrow(0, s.begin, s.length).copy_(s.grad);
    norms[rank] = fp8t::optim::sharded_grad_norm(sync.gradient_shards(), comm);
    // The optimizer's part: this rank writes 10 * (rank + 1) into its segments; the gather
    // brings every rank's segments to every rank.
    {
      torch::NoGradGuard no_grad;
      for (const auto& s : sync.shard_segments()) {
        net.params[s.param].view(-1).narrow(0, s.begin, s.length).fill_(10.0f * (rank + 1));
      }
    }
    sync.gather_parameters();
    for (auto& p : net.params) gathered[rank].push_back(p.detach().clone());
    // A NaN in one rank's shard: the global norm is NaN on both (the skip decision agrees).
    if (rank == 1) sync.gradient_shards().front().fill_(std::nanf(""));
    nan_norms[rank] = fp8t::optim::sharded_grad_norm(sync.gradient_shards(), comm);
    // zero_grad() releases the shards too (the next reduce-scatter allocates new ones).
    sync.zero_grad();
    for (const auto& shard : sync.gradient_shards()) released[rank] = released[rank] && !shard.defined();
    for (const auto& s : sync.shard_segments()) released[rank] = released[rank] && s.grad.numel() == 0;
  });
  CHECK(released[0]);
  CHECK(released[1]);
  double total_sq = 0;
  for (size_t i = 0; i < local[0].size(); ++i) {
    INFO("parameter " << i);
    const at::Tensor expect = ((local[0][i] + local[1][i]) / 2).reshape(-1);
    total_sq += expect.square().sum().item<double>();
    at::Tensor owner = at::full({expect.numel()}, -1.0f);
    for (int r = 0; r < world; ++r) {
      for (const auto& s : segments[r]) {
        if (s.param != i) continue;
        // Each element is owned by exactly one rank.
        REQUIRE(at::equal(owner.narrow(0, s.begin, s.length), at::full({s.length}, -1.0f)));
        owner.narrow(0, s.begin, s.length).fill_(static_cast<float>(r));
        // The same float32 sums as the all-reduce test (tolerance: summation order).
        CHECK(at::allclose(synced[r][i].reshape(-1).narrow(0, s.begin, s.length), expect.narrow(0, s.begin, s.length),
                           1e-5, 1e-7));
      }
    }
    REQUIRE(owner.min().item<float>() >= 0);  // segments tile the parameter
    // After the gather every rank holds 10 where rank 0 owns, 20 where rank 1 owns.
    const at::Tensor want = (owner + 1) * 10;
    CHECK(at::equal(gathered[0][i].reshape(-1), want));
    CHECK(at::equal(gathered[1][i].reshape(-1), want));
  }
  // The global norm is the norm of the averaged gradients, the same on both ranks (float32).
  CHECK(at::equal(norms[0], norms[1]));
  CHECK(norms[0].item<double>() == Approx(std::sqrt(total_sq)).epsilon(1e-5));
  CHECK(std::isnan(nan_norms[0].item<float>()));
  CHECK(std::isnan(nan_norms[1].item<float>()));
}

namespace {

// Six 16 x 16 layers: with 1 KiB buckets, one bucket per layer.
struct DeepNet {
  std::vector<at::Tensor> params;
  explicit DeepNet(int seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (int i = 0; i < 6; ++i) params.push_back((at::randn({16, 16}, gen) * 0.3).requires_grad_());
  }
  at::Tensor loss(const at::Tensor& x) const {
    at::Tensor h = x;
    for (const auto& w : params) h = at::matmul(h, w).tanh();
    return h.pow(2).mean();
  }
};

at::Tensor rows_of(int rank, int micro) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(300 * rank + micro + 11);
  return at::randn({8, 16}, gen);
}

}  // namespace

TEST_CASE("ZeRO-1 buckets exist only while needed: kept over the micro-batches, released after the reduce-scatter",
          "[dist]") {
  const int world = 2;
  struct RankResult {
    int buckets = 0;
    int64_t all_bytes = 0, after_unarmed = 0, after_finish = 0, after_gather = 0;
    int peak_single = 0;  // full buckets at once in a backward without accumulation
    bool grads_undefined = false, shards_released = false;
    std::vector<at::Tensor> accumulated, whole;  // per parameter: 2 micro-batches vs one batch of both
  };
  std::vector<RankResult> out(world);
  run_ranks(world, std::chrono::seconds(60), [&](int rank, Communicator& comm) {
    RankResult& r = out[rank];
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    DeepNet net(3), ref(3);
    GradientSync sync(shared, net.params, /*bucket_bytes=*/1024, /*shard=*/true);
    GradientSync ref_sync(shared, ref.params, /*bucket_bytes=*/1024, /*shard=*/true);
    r.buckets = sync.num_buckets();
    r.all_bytes = 4 * 6 * 16 * 16;  // no padding: 256 elements per bucket, even
    REQUIRE(sync.full_bucket_bytes() == 0);  // nothing allocated before the first backward
    for (int step = 0; step < 2; ++step) {  // the second step: fresh zeroed buckets, shards overwritten
      sync.zero_grad();
      (net.loss(rows_of(rank, 2 * step)) / 2).backward();  // micro-batch 1: accumulated locally
      r.after_unarmed = sync.full_bucket_bytes();
      sync.arm();
      (net.loss(rows_of(rank, 2 * step + 1)) / 2).backward();
      sync.finish();
      r.after_finish = sync.full_bucket_bytes();
      // The same rows as one micro-batch of 16 (the mean over both halves).
      ref_sync.zero_grad();
      ref_sync.arm();
      ref.loss(at::cat({rows_of(rank, 2 * step), rows_of(rank, 2 * step + 1)})).backward();
      ref_sync.finish();
      r.peak_single = ref_sync.peak_full_buckets();
    }
    r.grads_undefined = std::none_of(net.params.begin(), net.params.end(), [](const at::Tensor& p) { return p.grad().defined(); });
    for (const auto& s : sync.shard_segments()) r.accumulated.push_back(s.grad.clone());
    for (const auto& s : ref_sync.shard_segments()) r.whole.push_back(s.grad.clone());
    sync.gather_parameters();  // transient staging: nothing stays allocated
    r.after_gather = sync.full_bucket_bytes();
    sync.zero_grad();  // and the shards go until the next reduce-scatter
    r.shards_released = true;
    for (const auto& shard : sync.gradient_shards()) r.shards_released = r.shards_released && !shard.defined();
  });
  for (int rank = 0; rank < world; ++rank) {
    INFO("rank " << rank);
    const RankResult& r = out[rank];
    REQUIRE(r.buckets == 6);
    CHECK(r.after_unarmed == r.all_bytes);  // every bucket kept between the micro-batches
    CHECK(r.after_finish == 0);             // and released once reduced
    CHECK(r.after_gather == 0);
    CHECK(r.grads_undefined);
    CHECK(r.shards_released);
    // Without accumulation at most three full buckets exist at once (filling, reducing, the
    // one released at the next launch), not all six.
    CHECK(r.peak_single >= 1);
    CHECK(r.peak_single <= 3);
    REQUIRE(r.accumulated.size() == r.whole.size());
    for (size_t i = 0; i < r.whole.size(); ++i) {
      INFO("segment " << i);
      // fp32: two half-batch gradients summed vs one GEMM over both halves (and the mean
      // taken before vs after): summation order only, a few ulps of values of order 1e-2.
      CHECK(at::allclose(r.accumulated[i], r.whole[i], /*rtol=*/1e-5, /*atol=*/1e-7));
    }
    CHECK(r.whole.front().abs().max().item<float>() > 0);  // the gradients are not trivially zero
  }
}
