// lib/dist (communicator + gradient buckets + amax reduction) with two ranks in one process:
// two threads, each with its own TCP-store client and Gloo process group on the CPU.
#include "lib/dist/grad_sync.h"

#include <torch/torch.h>  // torch::autograd

#include <exception>  // std::exception_ptr
#include <functional>  // std::function
#include <thread>     // std::thread

#include "lib/dist/communicator.h"    // Communicator
#include "lib/fp8/delayed_scaling.h"  // DelayedScaling
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"  // run_ranks

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
  std::vector<bool> still_views(world);
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
