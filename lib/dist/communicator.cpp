#include "lib/dist/communicator.h"

#include <spdlog/spdlog.h>  // spdlog::debug

#if defined(FP8T_HAVE_GLOO)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>  // c10d::ProcessGroupGloo
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>  // c10d::PrefixStore
#include <torch/csrc/distributed/c10d/TCPStore.hpp>     // c10d::TCPStore
#include <torch/csrc/distributed/c10d/Work.hpp>         // c10d::Work

#include <algorithm>  // std::find
#include <cstdlib>    // std::getenv
#include <exception>  // std::exception
#include <functional>  // std::function

#include "lib/dist/backends.h"  // detail::make_nccl_backend
#include "lib/util/error.h"     // FP8T_THROW, FP8T_INPUT_CHECK

namespace fp8t::dist {

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;  // the job's store (subgroups take their own prefix of it)
  c10::intrusive_ptr<c10d::Backend> backend;
  c10::Device device{c10::kCPU};
  int local_rank = 0;
};

struct Pending::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;
  std::function<void()> then;  // run after the wait (e.g. copying a staging buffer into place)
};

namespace {

[[noreturn]] void collective_failed(const std::string& what, const std::exception& e) {
  FP8T_THROW(ExitCode::kTrainingFailed, "data-parallel ", what, " failed (another rank died, stopped or timed out): ",
             e.what());
}

// The process group of `size` ranks over `store`: NCCL on a CUDA device, Gloo on the CPU.
c10::intrusive_ptr<c10d::Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                               const c10::Device& device, int local_rank,
                                               std::chrono::milliseconds timeout) {
  if (device.is_cuda()) {
#if defined(FP8T_WITH_CUDA)
    return detail::make_nccl_backend(store, rank, size, local_rank, timeout);
#endif
  } else {
#if defined(FP8T_HAVE_GLOO)
    auto gloo_opts = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    gloo_opts->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                                   : c10d::ProcessGroupGloo::createDefaultDevice());
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_opts);
#endif
  }
  (void)store, (void)rank, (void)size, (void)local_rank, (void)timeout;
  FP8T_THROW(ExitCode::kBadInput, "no process group backend for ", device.str(), " in this build");
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  return op == ReduceOp::kMax ? c10d::ReduceOp(c10d::ReduceOp::MAX) : c10d::ReduceOp(c10d::ReduceOp::SUM);
}

}  // namespace

void Pending::wait() {
  if (!impl_) return;
  try {
    impl_->work->wait();
    if (impl_->then) impl_->then();
  } catch (const std::exception& e) {
    collective_failed(impl_->what, e);
  }
  impl_.reset();
}

Communicator::~Communicator() {
  // An orderly NCCL teardown (otherwise LibTorch warns that the group was never destroyed).
  if (impl_ && impl_->backend) {
    try {
      impl_->backend->shutdown();
    } catch (const std::exception& e) {
      spdlog::debug("process group shutdown: {}", e.what());
    }
  }
}

std::shared_ptr<Communicator> Communicator::connect(const LaunchInfo& launch, const c10::Device& device,
                                                    std::chrono::seconds timeout) {
  std::shared_ptr<Communicator> comm(new Communicator());
  comm->impl_ = std::make_unique<Impl>();
  comm->rank_ = launch.rank;
  comm->world_size_ = launch.world_size;
  comm->timeout_ = timeout;
  comm->impl_->device = device;
  const std::chrono::milliseconds timeout_ms(timeout);

  // The backend is checked before anything waits on the network, so a build without it fails fast.
#if !defined(FP8T_HAVE_GLOO)
  FP8T_INPUT_CHECK(!device.is_cpu(), "data-parallel training on the CPU needs Gloo, and this fp8train was built "
                   "without the gloo headers (install libgloo-dev and rebuild), or train on CUDA GPUs (NCCL)");
#endif
#if !defined(FP8T_WITH_CUDA)
  FP8T_INPUT_CHECK(!device.is_cuda(), "data-parallel training on CUDA needs a CUDA build of fp8train");
#endif
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(launch.master_port);
    opts.timeout = timeout_ms;
    if (launch.agent_store) {
      // torchrun's agent serves the store; workers are clients under the agent's prefix.
      opts.isServer = false;
      auto tcp = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, opts);
      comm->impl_->store = c10::make_intrusive<c10d::PrefixStore>(
          "/worker/attempt_" + std::to_string(launch.restart_count), tcp);
    } else {
      opts.isServer = launch.rank == 0;
      opts.numWorkers = static_cast<std::size_t>(launch.world_size);
      opts.waitWorkers = true;
      comm->impl_->store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, opts);
    }
    auto store = c10::make_intrusive<c10d::PrefixStore>("fp8train", comm->impl_->store);
    comm->impl_->local_rank = launch.local_rank;
    comm->impl_->backend = make_backend(store, launch.rank, launch.world_size, device, launch.local_rank, timeout_ms);
    comm->backend_name_ = device.is_cuda() ? "nccl" : "gloo";
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    FP8T_THROW(ExitCode::kTrainingFailed, "could not join the data-parallel job (", launch.describe(),
               ", timeout ", timeout.count(), " s; dist.timeout_s sets it): ", e.what());
  }
  spdlog::debug("joined the process group: {} over {}", launch.describe(), comm->backend_name_);
  return comm;
}

std::shared_ptr<Communicator> Communicator::subgroup(const std::string& tag, const std::vector<int>& members) const {
  const auto me = std::find(members.begin(), members.end(), rank_);
  FP8T_CHECK(me != members.end(), "Communicator::subgroup: rank ", rank_, " is not a member of '", tag, "'");
  std::shared_ptr<Communicator> group(new Communicator());
  group->impl_ = std::make_unique<Impl>();
  group->impl_->device = impl_->device;
  group->impl_->local_rank = impl_->local_rank;
  group->impl_->store = impl_->store;
  group->rank_ = static_cast<int>(me - members.begin());
  group->world_size_ = static_cast<int>(members.size());
  group->backend_name_ = backend_name_;
  group->timeout_ = timeout_;
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>("fp8train/" + tag, impl_->store);
    group->impl_->backend = make_backend(store, group->rank_, group->world_size_, impl_->device, impl_->local_rank,
                                         std::chrono::milliseconds(timeout_));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    FP8T_THROW(ExitCode::kTrainingFailed, "could not form the data-parallel group '", tag, "' (timeout ",
               timeout_.count(), " s): ", e.what());
  }
  return group;
}

Pending Communicator::all_reduce_async(std::vector<at::Tensor> tensors, ReduceOp op) {
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = std::chrono::milliseconds(timeout_);
  try {
    auto impl = std::make_shared<Pending::Impl>();
    impl->what = "all-reduce";
    impl->work = impl_->backend->allreduce(tensors, opts);
    return Pending(std::move(impl));
  } catch (const std::exception& e) {
    collective_failed("all-reduce", e);
  }
}

void Communicator::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  all_reduce_async({tensor}, op).wait();
}

namespace {

void check_flat(const at::Tensor& t, const char* what, const char* op) {
  FP8T_CHECK(t.dim() == 1 && t.is_contiguous(), op, ": ", what, " must be a flat contiguous tensor");
}

// Whether `part` is exactly elements [rank * n, (rank + 1) * n) of `whole` (in place).
bool is_rank_slice(const at::Tensor& part, const at::Tensor& whole, int rank) {
  return part.is_alias_of(whole) && part.storage_offset() == whole.storage_offset() + rank * part.numel();
}

}  // namespace

Pending Communicator::reduce_scatter_async(const at::Tensor& output, const at::Tensor& input) {
  check_flat(output, "output", "reduce-scatter");
  check_flat(input, "input", "reduce-scatter");
  FP8T_CHECK(input.numel() == output.numel() * world_size_, "reduce-scatter: input has ", input.numel(),
             " elements, expected world size ", world_size_, " x ", output.numel());
  FP8T_CHECK(!output.is_alias_of(input) || is_rank_slice(output, input, rank_),
             "reduce-scatter: an output inside the input must be this rank's slice of it");
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  opts.timeout = std::chrono::milliseconds(timeout_);
  try {
    auto impl = std::make_shared<Pending::Impl>();
    impl->what = "reduce-scatter";
    at::Tensor in = input, out = output;
    // NCCL reduces in place when the output is the rank's slice of the input; Gloo gets a
    // separate output, copied into place after the wait.
    if (backend_name_ != "nccl" && out.is_alias_of(in)) {
      out = at::empty_like(output);
      impl->then = [dst = output, src = out] { dst.copy_(src); };
    }
    impl->work = impl_->backend->_reduce_scatter_base(out, in, opts);
    return Pending(std::move(impl));
  } catch (const std::exception& e) {
    collective_failed("reduce-scatter", e);
  }
}

Pending Communicator::all_gather_async(const at::Tensor& output, const at::Tensor& input) {
  check_flat(output, "output", "all-gather");
  check_flat(input, "input", "all-gather");
  FP8T_CHECK(output.numel() == input.numel() * world_size_, "all-gather: output has ", output.numel(),
             " elements, expected world size ", world_size_, " x ", input.numel());
  FP8T_CHECK(!input.is_alias_of(output) || is_rank_slice(input, output, rank_),
             "all-gather: an input inside the output must be this rank's slice of it");
  c10d::AllgatherOptions opts;
  opts.timeout = std::chrono::milliseconds(timeout_);
  try {
    auto impl = std::make_shared<Pending::Impl>();
    impl->what = "all-gather";
    at::Tensor in = input, out = output;
    if (backend_name_ != "nccl" && in.is_alias_of(out)) in = input.clone();  // Gloo: no aliasing
    impl->work = impl_->backend->_allgather_base(out, in, opts);
    return Pending(std::move(impl));
  } catch (const std::exception& e) {
    collective_failed("all-gather", e);
  }
}

void Communicator::reduce_scatter(const at::Tensor& output, const at::Tensor& input) {
  reduce_scatter_async(output, input).wait();
}

void Communicator::all_gather(const at::Tensor& output, const at::Tensor& input) {
  all_gather_async(output, input).wait();
}

void Communicator::broadcast(std::vector<at::Tensor> tensors, int root) {
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = std::chrono::milliseconds(timeout_);
  try {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      impl_->backend->broadcast(one, opts)->wait();
    }
  } catch (const std::exception& e) {
    collective_failed("broadcast", e);
  }
}

void Communicator::all_to_all(const at::Tensor& output, const at::Tensor& input,
                              const std::vector<int64_t>& output_splits, const std::vector<int64_t>& input_splits) {
  FP8T_CHECK(output.is_contiguous() && input.is_contiguous(), "all-to-all: tensors must be contiguous");
  FP8T_CHECK(static_cast<int>(output_splits.size()) == world_size_ && static_cast<int>(input_splits.size()) == world_size_,
             "all-to-all: one split per rank expected (", world_size_, " ranks)");
  c10d::AllToAllOptions opts;
  opts.timeout = std::chrono::milliseconds(timeout_);
  try {
    at::Tensor out = output, in = input;
    std::vector<int64_t> out_splits = output_splits, in_splits = input_splits;
    impl_->backend->alltoall_base(out, in, out_splits, in_splits, opts)->wait();
  } catch (const std::exception& e) {
    collective_failed("all-to-all", e);
  }
}

}  // namespace fp8t::dist
