// The CUDA path of ops::rope_qkv: an autograd node over fp8t_rope (kernels/rope.cu). Only work
// on the current LibTorch CUDA stream is enqueued (CUDA-graph capturable). Saved for the
// backward: the two tables (buffers of the model, no copy); nothing of qkv.
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard
#include <torch/torch.h>         // torch::autograd::Function

#include "fp8t_kernels.h"           // fp8t_rope
#include "lib/ops/rope.h"
#include "lib/util/cuda_tensors.h"  // stream_of, dtype_code, FP8T_KERNEL_CHECK

namespace fp8t {
namespace ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One part of a launch: `heads` heads of a [B, T, heads, D] view (strides in elements).
fp8t_rope_part part_of(const at::Tensor& src, const at::Tensor& dst, int op) {
  fp8t_rope_part p{};
  p.src = src.data_ptr();
  p.dst = dst.data_ptr();
  for (int i = 0; i < 3; ++i) {
    p.src_stride[i] = src.stride(i);
    p.dst_stride[i] = dst.stride(i);
  }
  p.heads = static_cast<int>(src.size(2));
  p.op = op;
  return p;
}

void launch(const fp8t_rope_part (&parts)[3], const at::Tensor& like, const at::Tensor& cos, const at::Tensor& sin,
            const char* what) {
  const int64_t B = like.size(0), T = like.size(1), D = like.size(3);
  FP8T_KERNEL_CHECK(fp8t_rope(parts, 3, cuda::dtype_code(like), B, T, static_cast<int>(D), cos.data_ptr<float>(),
                              sin.data_ptr<float>(), cos.stride(0), cos.size(0), cuda::stream_of(like)),
                    "RoPE ", what, " of q/k/v ", like.sizes(), " (", like.scalar_type(), ")");
}

// A [B, T, h, D] view the kernel can read: last dim contiguous, 16-byte aligned rows and heads.
at::Tensor readable(const at::Tensor& t) {
  const int64_t bytes = t.element_size();
  bool ok = t.stride(3) == 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  for (int i = 0; i < 3; ++i) ok = ok && (t.stride(i) * bytes) % 16 == 0;
  return ok ? t : t.contiguous();
}

class RopeQkvFunction : public torch::autograd::Function<RopeQkvFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& qkv, const at::Tensor& cos,
                               const at::Tensor& sin, int64_t n_head, int64_t n_kv_head) {
    const c10::cuda::CUDAGuard guard(qkv.device());
    const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (n_head + 2 * n_kv_head);
    const at::Tensor src = qkv.view({B, T, n_head + 2 * n_kv_head, D});
    at::Tensor q = at::empty({B, T, n_head, D}, qkv.options());
    at::Tensor k = at::empty({B, T, n_kv_head, D}, qkv.options());
    at::Tensor v = at::empty({B, T, n_kv_head, D}, qkv.options());
    const fp8t_rope_part parts[3] = {part_of(src.narrow(2, 0, n_head), q, FP8T_ROPE_ROTATE),
                                     part_of(src.narrow(2, n_head, n_kv_head), k, FP8T_ROPE_ROTATE),
                                     part_of(src.narrow(2, n_head + n_kv_head, n_kv_head), v, FP8T_ROPE_COPY)};
    launch(parts, q, cos, sin, "forward");
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["n_head"] = n_head;
    ctx->saved_data["n_kv_head"] = n_kv_head;
    return {q, k, v};
  }

  // grads: dq, dk, dv ([B, T, h, D] views of what attention's backward wrote; undefined ones
  // arrive as zeros).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const int64_t n_head = ctx->saved_data["n_head"].toInt(), n_kv_head = ctx->saved_data["n_kv_head"].toInt();
    const at::Tensor dq = readable(grads[0]), dk = readable(grads[1].to(dq.scalar_type())),
                     dv = readable(grads[2].to(dq.scalar_type()));
    const c10::cuda::CUDAGuard guard(dq.device());
    const int64_t B = dq.size(0), T = dq.size(1), D = dq.size(3);
    at::Tensor dqkv = at::empty({B, T, (n_head + 2 * n_kv_head) * D}, dq.options());
    const at::Tensor dst = dqkv.view({B, T, n_head + 2 * n_kv_head, D});
    const fp8t_rope_part parts[3] = {part_of(dq, dst.narrow(2, 0, n_head), FP8T_ROPE_ROTATE_BACK),
                                     part_of(dk, dst.narrow(2, n_head, n_kv_head), FP8T_ROPE_ROTATE_BACK),
                                     part_of(dv, dst.narrow(2, n_head + n_kv_head, n_kv_head), FP8T_ROPE_COPY)};
    launch(parts, dq, saved[0], saved[1], "backward");
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace detail {

QkvHeads rope_qkv_cuda(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t n_head,
                       int64_t n_kv_head) {
  const variable_list out = RopeQkvFunction::apply(qkv, cos, sin, n_head, n_kv_head);
  return {out[0], out[1], out[2]};
}

}  // namespace detail

}  // namespace ops
}  // namespace fp8t
