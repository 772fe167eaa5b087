// Rotary position embedding of q and k (and the copy of v beside them) in one launch, forward and
// backward: the LLaMA attention's RoPE without FP32 intermediates in device memory.
//
// What it replaces (lib/model/rope.cpp on the GPU before this kernel): x.to(float), a negated
// half, a concatenation, two products with the cos / sin tables, a sum and the rounding back, each
// its own pass over an FP32 copy of q and k, and the same again in the backward, plus the copy
// that concatenates dq, dk and dv into the fused projection's gradient. Here each thread reads 8
// pairs (x1[i..i+7], x2[i..i+7]: two 16-byte loads of bf16) and the 8 cosines and sines of its
// position (L2-resident tables), and writes the 8 rotated pairs once.
//
// Bits: the FP32 operations are LibTorch's, one IEEE operation each (__fmul_rn / __fadd_rn keep
// nvcc from contracting a product into the add), so the result rounded to the dtype equals the
// CPU composition's (tests/kernels/test_rope.cpp).
#include <stdint.h>  // int64_t

#include "dispatch.cuh"      // dispatch_dtype
#include "fp8t_kernels.h"    // the C API
#include "packed.cuh"        // ldg_floats, stg_floats, elem_bytes
#include "precondition.cuh"  // FP8T_LAUNCHER, FP8T_KERNEL_REQUIRE, aligned, valid_dtype

namespace {

using namespace fp8t::kern;

constexpr int kPairs = 8;  // pairs per thread: 16 bytes of bf16 per half
constexpr int kThreads = 256;

struct RopeArgs {
  fp8t_rope_part part[FP8T_ROPE_MAX_PARTS];
  int first_item[FP8T_ROPE_MAX_PARTS + 1];  // per token: items of the parts before part p
  int n_parts;
  int chunks;  // items per head: head_dim / 2 / kPairs
  int half;    // head_dim / 2
  int64_t seq;
  int64_t items;  // batch * seq * first_item[n_parts]
  const float* cos;
  const float* sin;
  int64_t table_stride;
};

// One thread's 8 pairs of one head of one token.
template <int kDtype>
__device__ __forceinline__ void rope_item(const RopeArgs& a, int64_t token, int j) {
  int p = 0;
#pragma unroll
  for (int q = 1; q < FP8T_ROPE_MAX_PARTS; ++q) p += (q < a.n_parts && j >= a.first_item[q]) ? 1 : 0;
  const fp8t_rope_part& part = a.part[p];
  j -= a.first_item[p];
  const int head = j / a.chunks;
  const int i0 = (j % a.chunks) * kPairs;
  const int64_t b = token / a.seq, t = token % a.seq;
  const int64_t src = b * part.src_stride[0] + t * part.src_stride[1] + head * part.src_stride[2] + i0;
  const int64_t dst = b * part.dst_stride[0] + t * part.dst_stride[1] + head * part.dst_stride[2] + i0;
  float x1[kPairs], x2[kPairs];
  ldg_floats<kDtype, kPairs>(part.src, src, x1);
  ldg_floats<kDtype, kPairs>(part.src, src + a.half, x2);
  if (part.op != FP8T_ROPE_COPY) {
    float c[kPairs], s[kPairs];
    ldg_floats<FP8T_DTYPE_F32, kPairs>(a.cos, t * a.table_stride + i0, c);
    ldg_floats<FP8T_DTYPE_F32, kPairs>(a.sin, t * a.table_stride + i0, s);
    // ROTATE_BACK is the transpose of ROTATE: the sine terms change sign.
    const bool back = part.op == FP8T_ROPE_ROTATE_BACK;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const float x2s = __fmul_rn(x2[k], s[k]), x1s = __fmul_rn(x1[k], s[k]);
      const float y1 = __fadd_rn(__fmul_rn(x1[k], c[k]), back ? x2s : -x2s);
      const float y2 = __fadd_rn(__fmul_rn(x2[k], c[k]), back ? -x1s : x1s);
      x1[k] = y1;
      x2[k] = y2;
    }
  }
  stg_floats<kDtype, kPairs>(part.dst, dst, x1);
  stg_floats<kDtype, kPairs>(part.dst, dst + a.half, x2);
}

template <int kDtype>
__global__ void __launch_bounds__(kThreads) rope_kernel(const RopeArgs a) {
  const int per_token = a.first_item[a.n_parts];
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < a.items;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    rope_item<kDtype>(a, idx / per_token, static_cast<int>(idx % per_token));
  }
}

bool strides_aligned(const int64_t (&s)[3], int64_t bytes) {
  return (s[0] * bytes) % 16 == 0 && (s[1] * bytes) % 16 == 0 && (s[2] * bytes) % 16 == 0;
}

}  // namespace

extern "C" cudaError_t fp8t_rope(const fp8t_rope_part* parts, int n_parts, int dtype, int64_t batch, int64_t seq,
                                 int head_dim, const float* cos, const float* sin, int64_t table_stride,
                                 int64_t table_rows, cudaStream_t stream) {
  FP8T_LAUNCHER("fp8t_rope");
  FP8T_KERNEL_REQUIRE(parts != nullptr && n_parts >= 1 && n_parts <= FP8T_ROPE_MAX_PARTS,
                      "between 1 and FP8T_ROPE_MAX_PARTS parts");
  FP8T_KERNEL_REQUIRE(valid_dtype(dtype), "the dtype is not fp32 or bf16");
  FP8T_KERNEL_REQUIRE(batch >= 0 && seq >= 0, "a dimension is negative");
  FP8T_KERNEL_REQUIRE(head_dim > 0 && head_dim % (2 * kPairs) == 0, "the head dimension is not a multiple of 16");
  FP8T_KERNEL_REQUIRE(seq <= table_rows, "the sequence is longer than the cos / sin tables");
  FP8T_KERNEL_REQUIRE(cos != nullptr && sin != nullptr && aligned(cos, 16) && aligned(sin, 16) &&
                          table_stride % 4 == 0 && table_stride >= head_dim / 2,
                      "the cos / sin tables are not 16-byte aligned with a stride of whole 16-byte vectors");
  const int64_t bytes = dtype == FP8T_DTYPE_F32 ? 4 : 2;
  RopeArgs a{};
  a.n_parts = n_parts;
  a.chunks = head_dim / 2 / kPairs;
  a.half = head_dim / 2;
  a.seq = seq;
  a.cos = cos;
  a.sin = sin;
  a.table_stride = table_stride;
  int64_t per_token = 0;
  for (int p = 0; p < n_parts; ++p) {
    const fp8t_rope_part& part = parts[p];
    FP8T_KERNEL_REQUIRE(part.heads >= 0, "a part has a negative number of heads");
    FP8T_KERNEL_REQUIRE(part.op == FP8T_ROPE_COPY || part.op == FP8T_ROPE_ROTATE || part.op == FP8T_ROPE_ROTATE_BACK,
                        "a part's op is not FP8T_ROPE_COPY, _ROTATE or _ROTATE_BACK");
    FP8T_KERNEL_REQUIRE(part.heads == 0 || (part.src != nullptr && part.dst != nullptr), "a part has no src or dst");
    FP8T_KERNEL_REQUIRE(aligned(part.src, 16) && aligned(part.dst, 16) && strides_aligned(part.src_stride, bytes) &&
                            strides_aligned(part.dst_stride, bytes),
                        "a part's src or dst is not 16-byte aligned, or a stride is not a multiple of 16 bytes");
    a.part[p] = part;
    a.first_item[p] = static_cast<int>(per_token);
    per_token += static_cast<int64_t>(part.heads) * a.chunks;
    FP8T_KERNEL_REQUIRE(per_token < (int64_t{1} << 30), "too many heads per token");
  }
  a.first_item[n_parts] = static_cast<int>(per_token);
  a.items = batch * seq * per_token;
  if (a.items == 0) return cudaSuccess;
  const int64_t blocks = (a.items + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  dispatch_dtype(dtype, [&](auto dt) { rope_kernel<decltype(dt)::value><<<grid, kThreads, 0, stream>>>(a); });
  return cudaGetLastError();
}
