// Helpers for the lib/dist tests.
#pragma once

#include <arpa/inet.h>   // htonl, ntohs
#include <netinet/in.h>  // sockaddr_in
#include <sys/socket.h>  // socket, bind, getsockname
#include <unistd.h>      // close

#include <chrono>     // std::chrono::seconds
#include <exception>  // std::exception_ptr
#include <functional>  // std::function
#include <thread>     // std::thread
#include <vector>     // std::vector

#include "lib/dist/communicator.h"  // Communicator
#include "lib/dist/launch.h"        // LaunchInfo
#include "tests/catch.h"

// A test that cannot run here says why: Catch2 v3's SKIP; v2 has none, so the reason is printed
// and the test case ends there.
#if defined(FP8T_CATCH_V3)
#define FP8T_SKIP(why) SKIP(why)
#else
#define FP8T_SKIP(why)          \
  do {                          \
    WARN("SKIPPED: " << (why)); \
    return;                     \
  } while (false)
#endif

namespace fp8t::test {

// A TCP port on the loopback interface that was free a moment ago (for a TCP store).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Rank `rank` of a `world`-rank job whose rank 0 hosts the store on `port` (loopback).
inline dist::LaunchInfo rank_of(int rank, int world, int port) {
  dist::LaunchInfo info;
  info.launched = true;
  info.rank = rank;
  info.world_size = world;
  info.master_port = port;
  return info;
}

// Runs body(rank, communicator) on `world` threads joined into one Gloo group (or, with
// `gpus`, one NCCL group with rank r on cuda:r); rethrows the first failure on the calling
// thread (Catch2 assertions stay on this thread).
inline void run_ranks(int world, std::chrono::seconds timeout,
                      const std::function<void(int, dist::Communicator&)>& body, bool gpus = false) {
  const int port = free_port();
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::LaunchInfo info = rank_of(r, world, port);
        info.local_rank = r;
        const c10::Device device = gpus ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(r)) : c10::Device(c10::kCPU);
        auto comm = dist::Communicator::connect(info, device, timeout);
        body(r, *comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace fp8t::test
