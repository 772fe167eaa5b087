// FP8 cast with fused amax: q = fp8(x * scale), amax = max|x| (unscaled), scale_inv snapshot.
//
// Memory-bound: per element 4 (fp32) or 2 (bf16) bytes in, 1 byte out. Each thread converts
// 16 elements per step with 16-byte loads and one 16-byte store; several loads are issued before
// the first use. The amax is reduced per block and committed with one atomic per block.
#include "dispatch.cuh"      // dispatch_dtype_format
#include "fp8_device.cuh"    // load/convert helpers, block_amax_commit
#include "fp8t_kernels.h"    // the C API
#include "packed.cuh"        // Packed128, ldg_floats
#include "precondition.cuh"  // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;

constexpr int kThreads = 256;
constexpr int kVec = 16;  // elements per thread per step (one 16-byte store of codes)

template <int kDtype, int kFormat>
__global__ void __launch_bounds__(kThreads) cast_kernel(const void* __restrict__ x, int64_t n,
                                                        const float* __restrict__ scale_ptr,
                                                        uint8_t* __restrict__ out, float* amax,
                                                        float* scale_inv_out, bool vectorized) {
  const float scale = *scale_ptr;
  if (blockIdx.x == 0 && threadIdx.x == 0 && scale_inv_out != nullptr) *scale_inv_out = 1.0f / scale;

  int local_max = 0;  // abs bits; 0 == +0.0f
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t scalar_begin = 0;
  if (vectorized) {
    const int64_t n_chunks = n / kVec;
    for (int64_t c = tid; c < n_chunks; c += stride) {
      float v[kVec];
      ldg_floats<kDtype>(x, c * kVec, v);
      Packed128 codes;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lo = to_fp8x2<kFormat>(v[4 * i + 0] * scale, v[4 * i + 1] * scale);
        const uint32_t hi = to_fp8x2<kFormat>(v[4 * i + 2] * scale, v[4 * i + 3] * scale);
        codes.w[i] = lo | (hi << 16);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) local_max = max(local_max, abs_bits(v[i]));
      codes.store(out + c * kVec);
    }
    scalar_begin = n_chunks * kVec;
  }
  for (int64_t i = scalar_begin + tid; i < n; i += stride) {
    const float v = load_elem<kDtype>(x, i);
    out[i] = to_fp8<kFormat>(v * scale);
    local_max = max(local_max, abs_bits(v));
  }
  block_amax_commit(local_max, amax);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_cast(const void* x, int x_dtype, int64_t n, const float* scale,
                                 int fp8_format, uint8_t* out, float* amax, float* scale_inv_out,
                                 cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_cast");
  FP8T_KERNEL_REQUIRE(n >= 0, "the element count is negative");
  FP8T_KERNEL_REQUIRE(scale != nullptr, "no scale");
  FP8T_KERNEL_REQUIRE(n == 0 || (x != nullptr && out != nullptr), "no input or output for a nonempty tensor");
  FP8T_KERNEL_REQUIRE(valid_dtype(x_dtype), "the input dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(valid_format(fp8_format), "the FP8 format is not E4M3 or E5M2");
  const bool vec = aligned(x, 16) && aligned(out, 16);
  // Enough blocks to fill the GPU several times over; beyond that the grid-stride loop takes
  // over, which also keeps the number of amax atomics small.
  const int64_t work = vec ? n / kVec + (n % kVec) : n;
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 2048 ? 2048 : blocks)));
  dispatch_dtype_format(x_dtype, fp8_format, [&](auto dtype, auto format) {
    cast_kernel<decltype(dtype)::value, decltype(format)::value>
        <<<grid, kThreads, 0, stream>>>(x, n, scale, out, amax, scale_inv_out, vec);
  });
  return cudaGetLastError();
}
