// Internal to lib/dist: construction of the c10d backends. Only communicator.cpp and
// nccl_cuda.cpp include this (it pulls in the c10d headers).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>  // c10d::Backend
#include <torch/csrc/distributed/c10d/Store.hpp>    // c10d::Store

#include <chrono>  // std::chrono::milliseconds

namespace fp8t::dist::detail {

#if defined(FP8T_WITH_CUDA)
// ProcessGroupNCCL on cuda:<local_rank>, which it also makes the current device.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int world_size, int local_rank,
                                                    std::chrono::milliseconds timeout);
#endif

}  // namespace fp8t::dist::detail
