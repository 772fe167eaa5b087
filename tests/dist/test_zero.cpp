// ZeRO-1 (dist.zero 1: lib/dist/grad_sync.h sharded buckets, lib/optim/optimizer.h sharded
// AdamW, wired by lib/step/session.cpp) against plain data parallelism (DDP), two Gloo ranks in
// one process (two threads). Each rank trains the same tiny model on its own rows.
#include "lib/step/session.h"

#include <memory>  // std::shared_ptr
#include <mutex>   // std::mutex
#include <vector>  // std::vector

#include "lib/dist/communicator.h"      // Communicator
#include "lib/dist/grad_sync.h"         // GradientSync
#include "lib/model/gpt.h"              // model::Gpt
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"  // run_ranks
#include "tests/dist/session_runs.h"    // tiny_run_config, train_ranks_run, max_relative

using namespace fp8t;
using test::max_relative;
using Trace = test::RunTrace;

namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 4;

ExperimentConfig tiny(Precision precision, ZeroStage zero) { return test::tiny_run_config(precision, zero); }

data::Batch batch_of(int rank, int step, int micro) { return test::rank_batch(rank, step, micro); }

Trace train_run(int rank, dist::Communicator& comm, const ExperimentConfig& cfg, double grad_clip,
                const at::Device& device = at::Device(at::kCPU)) {
  ExperimentConfig c = cfg;
  c.train.grad_clip = grad_clip;
  return test::train_ranks_run(rank, comm, c, kSteps, device);
}

// DDP then ZeRO-1 on every rank, with the same batches.
void run_both(Precision precision, double grad_clip, std::vector<Trace>& ddp, std::vector<Trace>& zero) {
  ddp.assign(kWorld, {});
  zero.assign(kWorld, {});
  test::run_ranks(kWorld, std::chrono::seconds(120), [&](int rank, dist::Communicator& comm) {
    ddp[rank] = train_run(rank, comm, tiny(precision, ZeroStage::kNone), grad_clip);
    zero[rank] = train_run(rank, comm, tiny(precision, ZeroStage::kOptimizer), grad_clip);
  });
}

}  // namespace

TEST_CASE("ZeRO-1 matches DDP in fp32: the same losses, identical weights on every rank", "[dist]") {
  std::vector<Trace> ddp, zero;
  run_both(Precision::kFp32, /*grad_clip=*/1.0, ddp, zero);
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    REQUIRE(zero[r].segments > 0);
    // 1e-5 relative: the sums over ranks are the same two-term sums; the gradient norm (for the
    // clip divisor) is summed in another order (squared shard norms vs. per-tensor norms), which
    // moves the update by float32 rounding only.
    CHECK(max_relative(zero[r].losses, ddp[r].losses) <= 1e-5);
    CHECK(at::allclose(zero[r].weights, ddp[r].weights, /*rtol=*/1e-5, /*atol=*/1e-6));
  }
  // Every rank ends with the same full weights (gathered), bit for bit.
  CHECK(at::equal(zero[0].weights, zero[1].weights));
  CHECK(zero[0].losses.back() < zero[0].losses.front());
}

TEST_CASE("ZeRO-1 matches DDP in fp8 (CPU emulation): identical FP8 scales", "[dist]") {
  std::vector<Trace> ddp, zero;
  // Without clipping the ZeRO-1 update is the DDP update element by element (same gradient
  // sums, same AdamW formula), so the scales are compared exactly.
  run_both(Precision::kFp8, /*grad_clip=*/0.0, ddp, zero);
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    REQUIRE(zero[r].scales.size() == static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      INFO("step " << s + 1);
      CHECK(at::equal(zero[r].scales[s], zero[0].scales[s]));  // the same on every rank
      CHECK(at::equal(zero[r].scales[s], ddp[r].scales[s]));   // and the same as DDP's
    }
    CHECK(max_relative(zero[r].losses, ddp[r].losses) <= 1e-5);
  }
  CHECK(at::equal(zero[0].weights, zero[1].weights));
}

TEST_CASE("ZeRO-1 trains in bf16 and fp16 with identical weights on every rank", "[dist]") {
  const Precision precision = GENERATE(Precision::kBf16, Precision::kFp16);
  INFO("bf16 " << (precision == Precision::kBf16));
  std::vector<Trace> zero(kWorld);
  test::run_ranks(kWorld, std::chrono::seconds(120), [&](int rank, dist::Communicator& comm) {
    zero[rank] = train_run(rank, comm, tiny(precision, ZeroStage::kOptimizer), 1.0);
  });
  for (int r = 0; r < kWorld; ++r) {
    for (double l : zero[r].losses) CHECK(std::isfinite(l));
  }
  CHECK(at::equal(zero[0].weights, zero[1].weights));
}

TEST_CASE("ZeRO-1 over NCCL on two GPUs matches DDP (fp32, bf16, fp8)", "[dist][cuda]") {
  if (!torch::cuda::is_available() || torch::cuda::device_count() < 2) SKIP("needs two CUDA GPUs");
  const Precision precision = GENERATE(Precision::kFp32, Precision::kBf16, Precision::kFp8);
  INFO("precision " << static_cast<int>(precision));
  std::vector<Trace> ddp(kWorld), zero(kWorld);
  test::run_ranks(
      kWorld, std::chrono::seconds(120),
      [&](int rank, dist::Communicator& comm) {
        const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
        ddp[rank] = train_run(rank, comm, tiny(precision, ZeroStage::kNone), 0.0, gpu);
        zero[rank] = train_run(rank, comm, tiny(precision, ZeroStage::kOptimizer), 0.0, gpu);
      },
      /*gpus=*/true);
  // Identical weights on both ranks; the losses as DDP's within float32 rounding (NCCL may sum
  // in another order for a reduce-scatter than for an all-reduce; bf16/fp8 GEMMs amplify a
  // last-bit difference, hence 1e-3 there).
  CHECK(at::equal(zero[0].weights, zero[1].weights));
  const double tol = precision == Precision::kFp32 ? 1e-5 : 1e-3;
  for (int r = 0; r < kWorld; ++r) CHECK(max_relative(zero[r].losses, ddp[r].losses) <= tol);
  for (size_t s = 0; s < zero[0].scales.size(); ++s) CHECK(at::equal(zero[0].scales[s], zero[1].scales[s]));
}

TEST_CASE("ZeRO-1 keeps no gradient buffers between steps; DDP keeps all of its buckets", "[dist]") {
  // bytes of full buckets after each step, and whether any parameter still had a .grad (or,
  // ZeRO-1, any gradient shard was still allocated)
  std::vector<std::vector<int64_t>> bytes(2 * kWorld);
  std::vector<int> any_grad(2 * kWorld, 0);
  test::run_ranks(kWorld, std::chrono::seconds(120), [&](int rank, dist::Communicator& comm) {
    for (int zero = 0; zero <= 1; ++zero) {
      static std::mutex construction;  // the ranks are threads (see train_run)
      std::unique_lock<std::mutex> lock(construction);
      const ZeroStage stage = zero == 0 ? ZeroStage::kNone : ZeroStage::kOptimizer;
      step::Session session(tiny(Precision::kFp32, stage), at::Device(at::kCPU));
      lock.unlock();
      session.prepare_training(std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {}));
      const int slot = 2 * rank + zero;
      for (int step = 0; step < 2; ++step) {  // 2 micro-batches each (tiny's grad_accum_steps)
        int micro = 0;
        at::Tensor loss_sum = at::zeros({});
        session.step([&] { return batch_of(rank, step, micro++); }, 3e-3, loss_sum, {}, step + 1);
        bytes[slot].push_back(session.gradient_sync()->full_bucket_bytes());
        for (const at::Tensor& p : session.parameters()) any_grad[slot] |= p.grad().defined() ? 1 : 0;
        if (zero == 1) {  // nor the gradient shards: they exist from the reduce-scatter to the update
          for (const at::Tensor& s : session.gradient_sync()->gradient_shards()) any_grad[slot] |= s.defined() ? 1 : 0;
        }
      }
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    const auto& ddp = bytes[2 * r];
    const auto& zero = bytes[2 * r + 1];
    REQUIRE(ddp.size() == 2);
    CHECK(ddp[0] > 0);          // DDP: every bucket, persistent (the grads are views into them)
    CHECK(ddp[1] == ddp[0]);
    CHECK(any_grad[2 * r] == 1);
    CHECK(zero == std::vector<int64_t>{0, 0});  // ZeRO-1: released after each step's reduce-scatter
    CHECK(any_grad[2 * r + 1] == 0);
  }
}
