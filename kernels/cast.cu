// FP8 cast with fused amax: q = fp8(x * scale), amax = max|x| (unscaled), scale_inv snapshot.
//
// Memory-bound: per element 4 (fp32) or 2 (bf16) bytes in, 1 byte out. Each thread converts
// 16 elements per step with 16-byte loads and one 16-byte store; several loads are issued before
// the first use. The amax is reduced per block and committed with one atomic per block.
#include "fp8_device.cuh"  // load/convert helpers, block_amax_commit
#include "fp8t_kernels.h"  // the C API

// ---- kernels --------------------------------------------------------------------------------

namespace {

using namespace fp8t::kern;

constexpr int kThreads = 256;
constexpr int kVec = 16;  // elements per thread per step (one 16-byte store of codes)

// Loads 16 consecutive elements starting at x + 16*chunk into v (16-byte loads).
template <int kDtype>
__device__ __forceinline__ void load16(const void* x, int64_t chunk, float (&v)[kVec]) {
  if constexpr (kDtype == FP8T_DTYPE_F32) {
    const float4* p = static_cast<const float4*>(x) + chunk * 4;
    float4 q[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = __ldg(p + i);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[4 * i + 0] = q[i].x;
      v[4 * i + 1] = q[i].y;
      v[4 * i + 2] = q[i].z;
      v[4 * i + 3] = q[i].w;
    }
  } else {
    const uint4* p = static_cast<const uint4*>(x) + chunk * 2;
    uint4 q[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) q[i] = __ldg(p + i);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[8 * i + 2 * j + 0] = __uint_as_float(w[j] << 16);
        v[8 * i + 2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      }
    }
  }
}

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
      load16<kDtype>(x, c, v);
      uint32_t packed[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lo = to_fp8x2<kFormat>(v[4 * i + 0] * scale, v[4 * i + 1] * scale);
        const uint32_t hi = to_fp8x2<kFormat>(v[4 * i + 2] * scale, v[4 * i + 3] * scale);
        packed[i] = lo | (hi << 16);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) local_max = max(local_max, abs_bits(v[i]));
      reinterpret_cast<uint4*>(out)[c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
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

template <int kDtype>
void launch_cast(int fp8_format, dim3 grid, cudaStream_t stream, const void* x, int64_t n,
                 const float* scale, uint8_t* out, float* amax, float* scale_inv_out, bool vec) {
  if (fp8_format == FP8T_FORMAT_E4M3) {
    cast_kernel<kDtype, FP8T_FORMAT_E4M3><<<grid, kThreads, 0, stream>>>(x, n, scale, out, amax,
                                                                         scale_inv_out, vec);
  } else {
    cast_kernel<kDtype, FP8T_FORMAT_E5M2><<<grid, kThreads, 0, stream>>>(x, n, scale, out, amax,
                                                                         scale_inv_out, vec);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

extern "C" cudaError_t fp8t_cast(const void* x, int x_dtype, int64_t n, const float* scale,
                                 int fp8_format, uint8_t* out, float* amax, float* scale_inv_out,
                                 cudaStream_t stream) {
  if (n < 0 || scale == nullptr || (n > 0 && (x == nullptr || out == nullptr)) ||
      (x_dtype != FP8T_DTYPE_F32 && x_dtype != FP8T_DTYPE_BF16) ||
      (fp8_format != FP8T_FORMAT_E4M3 && fp8_format != FP8T_FORMAT_E5M2)) {
    return cudaErrorInvalidValue;
  }
  const bool vec = aligned16(x) && aligned16(out);
  // Enough blocks to fill the GPU several times over; beyond that the grid-stride loop takes
  // over, which also keeps the number of amax atomics small.
  const int64_t work = vec ? n / kVec + (n % kVec) : n;
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 2048 ? 2048 : blocks)));
  if (x_dtype == FP8T_DTYPE_F32) {
    launch_cast<FP8T_DTYPE_F32>(fp8_format, grid, stream, x, n, scale, out, amax, scale_inv_out, vec);
  } else {
    launch_cast<FP8T_DTYPE_BF16>(fp8_format, grid, stream, x, n, scale, out, amax, scale_inv_out, vec);
  }
  return cudaGetLastError();
}
