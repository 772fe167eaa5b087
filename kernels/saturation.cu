// FP8 health statistics: how much of a tensor saturates and how much flushes to zero when it is
// cast with a given scale (the fp8 "stats" of a layer, recipe.stats).
//
// A block counts in registers and adds its two totals with one 64-bit atomic each; a second
// one-thread launch turns the counts into fractions, so the host never reads anything.
#include "dispatch.cuh"                    // dispatch_dtype_format
#include "fp8_device.cuh"                  // load_elem, to_fp8
#include "fp8t_kernels.h"                  // the C API
#include "lib/numerics/saturation_math.h"  // fp8t::fp8::saturates, flushes_to_zero
#include "precondition.cuh"                // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;

constexpr int kThreads = 256;

template <int kDtype, int kFormat>
__global__ void __launch_bounds__(kThreads)
    saturation_count_kernel(const void* __restrict__ x, int64_t n, const float* __restrict__ scale_ptr,
                            unsigned long long* counters) {
  __shared__ unsigned int block_counts[2];
  if (threadIdx.x < 2) block_counts[threadIdx.x] = 0;
  __syncthreads();
  const float scale = *scale_ptr;
  const float fmax = fp8t::fp8::format_max(static_cast<fp8t::fp8::Format>(kFormat));
  unsigned int saturated = 0, flushed = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = load_elem<kDtype>(x, i);
    const float s = v * scale;
    saturated += fp8t::fp8::saturates(s, fmax) ? 1u : 0u;
    flushed += fp8t::fp8::flushes_to_zero(v, to_fp8<kFormat>(s)) ? 1u : 0u;
  }
  // Warp sums, then shared-memory adds (cheap: one per warp), then one global atomic each.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    saturated += __shfl_xor_sync(0xffffffffu, saturated, o);
    flushed += __shfl_xor_sync(0xffffffffu, flushed, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&block_counts[0], saturated);
    atomicAdd(&block_counts[1], flushed);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&counters[0], static_cast<unsigned long long>(block_counts[0]));
    atomicAdd(&counters[1], static_cast<unsigned long long>(block_counts[1]));
  }
}

__global__ void saturation_finalize_kernel(const unsigned long long* counters, int64_t n, float* out) {
  const double denom = n > 0 ? static_cast<double>(n) : 1.0;
  out[0] = static_cast<float>(static_cast<double>(counters[0]) / denom);
  out[1] = static_cast<float>(static_cast<double>(counters[1]) / denom);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_saturation_stats(const void* x, int x_dtype, int64_t n,
                                             const float* scale, int fp8_format, float* out,
                                             unsigned long long* counters, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_saturation_stats");
  FP8T_KERNEL_REQUIRE(n >= 0, "the element count is negative");
  FP8T_KERNEL_REQUIRE(scale != nullptr && out != nullptr && counters != nullptr,
                      "no scale, output or counter workspace");
  FP8T_KERNEL_REQUIRE(n == 0 || x != nullptr, "no input for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(valid_format(fp8_format), "the FP8 format is not E4M3 or E5M2");
  cudaError_t err = cudaMemsetAsync(counters, 0, 2 * sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return err;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks)));
  dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
    saturation_count_kernel<decltype(dtype)::value, decltype(format)::value>
        <<<grid, kThreads, 0, stream>>>(x, n, scale, counters);
  });
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  saturation_finalize_kernel<<<1, 1, 0, stream>>>(counters, n, out);
  return cudaGetLastError();
}
