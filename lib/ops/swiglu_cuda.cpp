// The CUDA path of ops::swiglu: an autograd node over fp8t_swiglu_forward / _backward
// (kernels/swiglu.cu), on the current LibTorch CUDA stream. Saved for the backward: h alone.
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard
#include <torch/torch.h>         // torch::autograd::Function

#include <vector>  // std::vector

#include "fp8t_kernels.h"           // fp8t_swiglu_forward, fp8t_swiglu_backward
#include "lib/ops/swiglu.h"
#include "lib/util/cuda_tensors.h"  // stream_of, dtype_code, FP8T_KERNEL_CHECK

namespace fp8t {
namespace ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h_in) {
    const c10::cuda::CUDAGuard guard(h_in.device());
    const at::Tensor h = h_in.contiguous();
    const int64_t cols = h.size(-1) / 2, rows = cols > 0 ? h.numel() / (2 * cols) : 0;
    std::vector<int64_t> sizes = h.sizes().vec();
    sizes.back() = cols;
    at::Tensor y = at::empty(sizes, h.options());
    FP8T_KERNEL_CHECK(fp8t_swiglu_forward(h.data_ptr(), cuda::dtype_code(h), rows, cols, y.data_ptr(),
                                          cuda::stream_of(h)),
                      "SwiGLU of ", h.sizes(), " (", h.scalar_type(), ")");
    ctx->save_for_backward({h});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor h = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(h.device());
    const at::Tensor dy = grads[0].to(h.scalar_type()).contiguous();
    const int64_t cols = h.size(-1) / 2, rows = cols > 0 ? h.numel() / (2 * cols) : 0;
    at::Tensor dh = at::empty_like(h);
    FP8T_KERNEL_CHECK(fp8t_swiglu_backward(dy.data_ptr(), h.data_ptr(), cuda::dtype_code(h), rows, cols, dh.data_ptr(),
                                           cuda::stream_of(h)),
                      "SwiGLU backward of ", h.sizes(), " (", h.scalar_type(), ")");
    return {dh};
  }
};

}  // namespace

namespace detail {

at::Tensor swiglu_cuda(const at::Tensor& h) { return SwigluFunction::apply(h); }

}  // namespace detail

}  // namespace ops
}  // namespace fp8t
