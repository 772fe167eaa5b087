// lib/dist on a GPU: the NCCL process group (lib/dist/nccl_cuda.cpp) of a one-rank job, the
// collectives the trainer uses, and gradient buckets of CUDA parameters.
#include <torch/torch.h>  // torch::cuda::is_available

#include "lib/dist/communicator.h"      // Communicator
#include "lib/dist/grad_sync.h"         // GradientSync
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"  // free_port
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU

using fp8t::dist::Communicator;
using fp8t::dist::LaunchInfo;

TEST_CASE("nccl: a one-rank job joins, reduces and broadcasts on the GPU", "[dist][cuda]") {
  FP8T_REQUIRE_GPU();
  LaunchInfo info;
  info.launched = true;
  info.master_port = fp8t::test::free_port();
  const c10::Device gpu(c10::kCUDA, 0);
  auto comm = Communicator::connect(info, gpu, std::chrono::seconds(60));
  REQUIRE(comm->backend_name() == "nccl");
  REQUIRE(comm->world_size() == 1);

  // One rank: SUM and MAX leave the values as they are (exactly), in place on the device.
  const at::Tensor t = at::tensor({1.5f, -2.0f, 448.0f}).to(gpu);
  const at::Tensor expect = t.clone();
  comm->all_reduce(t, fp8t::dist::ReduceOp::kMax);
  comm->all_reduce(t, fp8t::dist::ReduceOp::kSum);
  REQUIRE(t.is_cuda());
  REQUIRE(at::equal(t, expect));
  at::Tensor b = at::arange(8, at::TensorOptions().dtype(at::kFloat).device(gpu));
  comm->broadcast({b});
  REQUIRE(at::equal(b.cpu(), at::arange(8, at::kFloat)));

  // Gradient buckets of CUDA parameters: launched during the backward, averaged over one rank
  // (unchanged), and bitwise the gradients autograd computes without buckets.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  std::vector<at::Tensor> params = {at::randn({64, 32}, gen).to(gpu).requires_grad_(),
                                    at::randn({32}, gen).to(gpu).requires_grad_()};
  const at::Tensor x = at::randn({16, 64}, gen).to(gpu);
  auto loss = [&] { return (at::matmul(x, params[0]) + params[1]).pow(2).mean(); };
  loss().backward();
  std::vector<at::Tensor> plain;
  for (auto& p : params) {
    plain.push_back(p.grad().clone());
    p.mutable_grad().reset();
  }
  fp8t::dist::GradientSync sync(comm, params, /*bucket_bytes=*/64);  // {bias} and {weight}
  REQUIRE(sync.num_buckets() == 2);
  sync.zero_grad();
  sync.arm();
  loss().backward();
  sync.finish();
  REQUIRE(sync.launched_during_backward() == 2);
  for (size_t i = 0; i < params.size(); ++i) REQUIRE(at::equal(params[i].grad(), plain[i]));
}

TEST_CASE("nccl: reduce-scatter and all-gather in place, and ZeRO-1 buckets, on a one-rank job", "[dist][cuda]") {
  FP8T_REQUIRE_GPU();
  LaunchInfo info;
  info.launched = true;
  info.master_port = fp8t::test::free_port();
  const c10::Device gpu(c10::kCUDA, 0);
  auto comm = Communicator::connect(info, gpu, std::chrono::seconds(60));
  // One rank: the shard is the whole tensor; in place (output = input) must leave it as it is.
  const at::Tensor t = at::arange(6, at::TensorOptions().dtype(at::kFloat).device(gpu));
  comm->reduce_scatter(t, t);
  comm->all_gather(t, t);
  const at::Tensor out = at::zeros({6}, t.options());
  comm->all_gather(out, t);
  REQUIRE(at::equal(t.cpu(), at::arange(6, at::kFloat)));
  REQUIRE(at::equal(out.cpu(), at::arange(6, at::kFloat)));

  // ZeRO-1 buckets of one rank: one segment per parameter, covering all of it; the gradients
  // equal autograd's, and gather_parameters leaves the weights as they are.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  std::vector<at::Tensor> params = {at::randn({64, 32}, gen).to(gpu).requires_grad_(),
                                    at::randn({32}, gen).to(gpu).requires_grad_()};
  const at::Tensor x = at::randn({16, 64}, gen).to(gpu);
  auto loss = [&] { return (at::matmul(x, params[0]) + params[1]).pow(2).mean(); };
  loss().backward();
  std::vector<at::Tensor> plain, weights;
  for (auto& p : params) {
    plain.push_back(p.grad().clone());
    weights.push_back(p.detach().clone());
    p.mutable_grad().reset();
  }
  fp8t::dist::GradientSync sync(comm, params, /*bucket_bytes=*/64, /*shard=*/true);
  REQUIRE(sync.shard_segments().size() == 2);
  sync.zero_grad();
  sync.arm();
  loss().backward();
  sync.finish();
  // The full buckets are released after their reduce-scatter; one rank's shard is all of a
  // bucket, so each segment's gradient is the whole parameter's.
  REQUIRE(sync.full_bucket_bytes() == 0);
  for (const auto& s : sync.shard_segments()) {
    REQUIRE_FALSE(params[s.param].grad().defined());
    REQUIRE(at::equal(s.grad.view(plain[s.param].sizes()), plain[s.param]));
  }
  sync.gather_parameters();
  for (size_t i = 0; i < params.size(); ++i) REQUIRE(at::equal(params[i].detach(), weights[i]));
}
