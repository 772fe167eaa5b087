// RoPE of a fused q/k/v projection on the GPU in one kernel each way (kernels/rope.cu): the
// attention's q and k rotated and v copied out of the projection's [B, T, (H + 2 KV) * D] output
// into one tensor each, FP32 math and one rounding to the activation dtype, the bits of
// lib/model/rope.cpp's composition (Rotary::apply). Its backward writes the projection's gradient
// in one pass from dq, dk and dv (no FP32 copies, no concatenation).
//
// Why it owns the copy of v too: v taken as a view would keep the whole projection output alive
// until the attention's backward (the fused attention kernels save v); copying v out lets that
// output go right after this op, so a layer keeps q, k and v (what attention reads) and nothing
// else of the projection.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <cstdint>  // int64_t

namespace fp8t {
namespace ops {

struct QkvHeads {
  at::Tensor q;  // [B, T, n_head, D]
  at::Tensor k;  // [B, T, n_kv_head, D]
  at::Tensor v;  // [B, T, n_kv_head, D]
};

// True when rope_qkv runs for these arguments: a CUDA build, qkv a CUDA float32 or bfloat16
// [B, T, (n_head + 2 n_kv_head) * head_dim] tensor with its last dim contiguous and 16-byte
// aligned rows, head_dim a multiple of 16, and float32 tables on qkv's device with T rows or more.
bool rope_qkv_fused(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                    const at::Tensor& cos, const at::Tensor& sin);

// q and k of qkv's [q | k | v] columns rotated by the tables (cos / sin [rows >= T, head_dim] in
// the half-split layout of lib/model/rope.h: each half repeated; the kernel reads the first half),
// v copied; differentiable in qkv. Requires rope_qkv_fused.
QkvHeads rope_qkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t n_head,
                  int64_t n_kv_head);

#if defined(FP8T_WITH_CUDA)
namespace detail {
// The CUDA path (lib/ops/rope_cuda.cpp); arguments checked by rope_qkv.
QkvHeads rope_qkv_cuda(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t n_head,
                       int64_t n_kv_head);
}  // namespace detail
#endif

}  // namespace ops
}  // namespace fp8t
