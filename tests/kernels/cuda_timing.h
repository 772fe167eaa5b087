// Timing helper of the GPU timing tests: the median of CUDA-event-timed runs on the current stream.
#pragma once

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream
#include <cuda_runtime.h>           // cudaEvent_t, cudaEventRecord, cudaEventElapsedTime

#include <algorithm>   // std::sort
#include <functional>  // std::function
#include <vector>      // std::vector

#include "tests/catch.h"  // REQUIRE

namespace fp8t {
namespace test {

// Median milliseconds of `run` over `repeats` launches on the current CUDA stream, each between
// its own pair of CUDA events, after `warmup` untimed launches. `run` enqueues work and checks
// its own launch errors.
inline double median_event_ms(int warmup, int repeats, const std::function<void()>& run) {
  const cudaStream_t s = at::cuda::getCurrentCUDAStream().stream();
  for (int i = 0; i < warmup; ++i) run();
  std::vector<cudaEvent_t> ev(2 * repeats);
  for (auto& e : ev) REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  for (int i = 0; i < repeats; ++i) {
    REQUIRE(cudaEventRecord(ev[2 * i], s) == cudaSuccess);
    run();
    REQUIRE(cudaEventRecord(ev[2 * i + 1], s) == cudaSuccess);
  }
  REQUIRE(cudaEventSynchronize(ev.back()) == cudaSuccess);
  std::vector<double> ms(repeats);
  for (int i = 0; i < repeats; ++i) {
    float t = 0.0f;
    REQUIRE(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]) == cudaSuccess);
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[repeats / 2];
}

}  // namespace test
}  // namespace fp8t
