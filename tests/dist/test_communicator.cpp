// lib/dist/communicator.cpp over Gloo: two ranks in one process (two threads, each with its own
// TCP-store client and process group on the CPU), checking the collectives' results and the
// errors of a rendezvous and a collective that time out.
#include "lib/dist/communicator.h"

#include <ATen/ATen.h>  // at::tensor, at::arange

#include <atomic>     // std::atomic
#include <chrono>     // std::chrono
#include <exception>  // std::exception_ptr
#include <functional>  // std::function
#include <string>     // std::string
#include <thread>     // std::thread
#include <vector>     // std::vector

#include "lib/util/error.h"  // fp8t::Error, ExitCode
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"  // free_port

using fp8t::ExitCode;
using fp8t::dist::Communicator;
using fp8t::dist::LaunchInfo;
using fp8t::dist::ReduceOp;

using fp8t::test::rank_of;
using fp8t::test::run_ranks;

namespace {

// Runs `f` and returns the fp8t::Error it throws (fails the test when it throws nothing).
template <class F>
fp8t::Error error_of(F&& f) {
  try {
    f();
  } catch (const fp8t::Error& e) {
    return e;
  }
  FAIL("expected an fp8t::Error");
  return fp8t::Error(ExitCode::kFailure, "");
}

}  // namespace

TEST_CASE("Communicator over Gloo: all-reduce sums and maxes in place on every rank", "[dist]") {
  // Small integers in float32: sums and maxima are exact, so the comparisons are exact.
  // The ranks are threads: they record, and the assertions run on this thread afterwards.
  std::vector<at::Tensor> sums(2), maxes(2), pair_a(2), pair_b(2);
  std::vector<std::string> backend(2);
  std::vector<int> ranks(2, -1), worlds(2), valid_after_wait(2, -1);
  run_ranks(2, std::chrono::seconds(30), [&](int rank, Communicator& comm) {
    backend[rank] = comm.backend_name();
    ranks[rank] = comm.rank();
    worlds[rank] = comm.world_size();
    sums[rank] = at::arange(4, at::kFloat) + 10 * rank;  // rank 0: 0 1 2 3; rank 1: 10 11 12 13
    comm.all_reduce(sums[rank], ReduceOp::kSum);
    maxes[rank] = rank == 0 ? at::tensor({5.0f, -1.0f, 0.0f}) : at::tensor({2.0f, 3.0f, -7.0f});
    comm.all_reduce(maxes[rank], ReduceOp::kMax);
    // Asynchronous, one tensor per call as GradientSync uses it (c10d reads several tensors in
    // one call as one per device and reduces them together), two in flight at once.
    pair_a[rank] = at::full({3}, static_cast<float>(rank + 1));
    pair_b[rank] = at::full({2, 2}, static_cast<float>(-rank));
    fp8t::dist::Pending first = comm.all_reduce_async({pair_a[rank]}, ReduceOp::kSum);
    fp8t::dist::Pending second = comm.all_reduce_async({pair_b[rank]}, ReduceOp::kMax);
    first.wait();
    second.wait();
    valid_after_wait[rank] = first.valid() ? 1 : 0;  // wait() consumes the handle
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(backend[r] == "gloo");
    CHECK(ranks[r] == r);
    CHECK(worlds[r] == 2);
    CHECK(valid_after_wait[r] == 0);
    CHECK(at::equal(sums[r], at::tensor({10.0f, 12.0f, 14.0f, 16.0f})));
    CHECK(at::equal(maxes[r], at::tensor({5.0f, 3.0f, 0.0f})));
    CHECK(at::equal(pair_a[r], at::full({3}, 3.0f)));
    CHECK(at::equal(pair_b[r], at::full({2, 2}, 0.0f)));  // max(0, -1)
  }
}

TEST_CASE("Communicator over Gloo: broadcast copies the root's tensors to every rank", "[dist]") {
  std::vector<at::Tensor> from0(2), from1(2), second(2);
  run_ranks(2, std::chrono::seconds(30), [&](int rank, Communicator& comm) {
    from0[rank] = at::full({4}, static_cast<float>(100 + rank));
    second[rank] = at::full({2}, static_cast<float>(200 + rank));
    comm.broadcast({from0[rank], second[rank]});  // root 0
    from1[rank] = at::full({3}, static_cast<float>(300 + rank));
    comm.broadcast({from1[rank]}, 1);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(at::equal(from0[r], at::full({4}, 100.0f)));
    CHECK(at::equal(second[r], at::full({2}, 200.0f)));
    CHECK(at::equal(from1[r], at::full({3}, 301.0f)));
  }
}

TEST_CASE("Communicator: a rendezvous that the other ranks never join fails after the timeout", "[dist]") {
  const int port = fp8t::test::free_port();
  const auto start = std::chrono::steady_clock::now();
  const fp8t::Error e = error_of([&] {
    Communicator::connect(rank_of(0, 2, port), c10::Device(c10::kCPU), std::chrono::seconds(1));
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(e.code() == ExitCode::kTrainingFailed);
  const std::string what = e.what();
  CHECK(what.find("could not join the data-parallel job") != std::string::npos);
  CHECK(what.find("dist.timeout_s") != std::string::npos);
  CHECK(waited < 20.0);  // bounded by the 1 s timeout (plus LibTorch's retry slack), not a hang
}

TEST_CASE("Communicator: a collective that another rank never joins fails after the timeout", "[dist]") {
  std::atomic<bool> rank0_done{false};
  std::string what;
  ExitCode code = ExitCode::kOk;
  run_ranks(2, std::chrono::seconds(1), [&](int rank, Communicator& comm) {
    if (rank == 1) {
      // Stays in the group without calling the collective until rank 0 has given up.
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    at::Tensor t = at::ones({4});
    try {
      comm.all_reduce(t, ReduceOp::kSum);
    } catch (const fp8t::Error& e) {
      what = e.what();
      code = e.code();
    }
    rank0_done.store(true);
  });
  CHECK(code == ExitCode::kTrainingFailed);
  CHECK(what.find("data-parallel all-reduce failed") != std::string::npos);
}

TEST_CASE("Communicator over Gloo: reduce-scatter and all-gather of flat tensors, also in place", "[dist]") {
  // Small integers in float32: the sums are exact, so the comparisons are exact.
  std::vector<at::Tensor> scattered(2), in_place(2), gathered(2), gathered_in_place(2);
  run_ranks(2, std::chrono::seconds(30), [&](int rank, Communicator& comm) {
    const at::Tensor input = at::arange(6, at::kFloat) + 100 * rank;  // rank 1: 100..105
    scattered[rank] = at::zeros({3});
    comm.reduce_scatter(scattered[rank], input);
    // In place: the output is this rank's half of the input (ZeRO-1's gradient buckets).
    in_place[rank] = at::arange(6, at::kFloat) + 100 * rank;
    comm.reduce_scatter(in_place[rank].narrow(0, 3 * rank, 3), in_place[rank]);
    gathered[rank] = at::zeros({4});
    comm.all_gather(gathered[rank], at::full({2}, static_cast<float>(rank + 1)));
    // In place: the input is this rank's slice of the output (ZeRO-1's parameter gather).
    gathered_in_place[rank] = at::full({4}, -1.0f);
    gathered_in_place[rank].narrow(0, 2 * rank, 2).fill_(static_cast<float>(10 * (rank + 1)));
    comm.all_gather_async(gathered_in_place[rank], gathered_in_place[rank].narrow(0, 2 * rank, 2)).wait();
  });
  CHECK(at::equal(scattered[0], at::tensor({100.0f, 102.0f, 104.0f})));
  CHECK(at::equal(scattered[1], at::tensor({106.0f, 108.0f, 110.0f})));
  CHECK(at::equal(in_place[0].narrow(0, 0, 3), at::tensor({100.0f, 102.0f, 104.0f})));
  CHECK(at::equal(in_place[1].narrow(0, 3, 3), at::tensor({106.0f, 108.0f, 110.0f})));
  for (int r = 0; r < 2; ++r) {
    CHECK(at::equal(gathered[r], at::tensor({1.0f, 1.0f, 2.0f, 2.0f})));
    CHECK(at::equal(gathered_in_place[r], at::tensor({10.0f, 10.0f, 20.0f, 20.0f})));
  }
}
