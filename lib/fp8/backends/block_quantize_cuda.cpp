// The GPU block casts (block_quantize.h): a LibTorch wrapper over kernels/block_quantize.cu.
// Only enqueues work on the current stream of x's device (no host synchronisation).
#include <c10/cuda/CUDAGuard.h>  // c10::cuda::CUDAGuard

#include "fp8t_block_kernels.h"               // fp8t_block_quantize_1x128 / _128x128 / _act
#include "lib/numerics/block_math.h"          // kBlockLen
#include "lib/fp8/backends/block_quantize.h"  // BlockQuantized, make_block_scales
#include "lib/util/cuda_tensors.h"            // stream_of, bytes_on, floats_on, dtype_code, FP8T_KERNEL_CHECK
#include "lib/util/error.h"                   // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

// Codes and a scale grid to be written by the kernel (it writes every entry of the grid's buffer,
// padding included).
BlockCodes allocate(int64_t rows, int64_t k, int block_rows, const at::Tensor& like) {
  BlockCodes out;
  out.codes = at::empty({rows, k}, cuda::bytes_on(like));
  out.scale_inv = make_block_scales(rows, k, block_rows, like.device(), /*zero_fill=*/false);
  return out;
}

BlockQuantized allocate_layouts(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise) {
  BlockQuantized q;
  if (rowwise) q.rowwise = allocate(x.size(0), x.size(1), block_rows, x);
  if (columnwise) q.columnwise = allocate(x.size(1), x.size(0), block_rows, x);
  return q;
}

uint8_t* codes_ptr(const BlockCodes& c) { return c.defined() ? c.codes.data_ptr<uint8_t>() : nullptr; }
float* scales_ptr(const BlockCodes& c) { return c.defined() ? c.scale_inv.data_ptr<float>() : nullptr; }

void check_input(const at::Tensor& x, const char* what) {
  FP8T_CHECK(x.dim() == 2 && x.is_cuda(), what, " expects a 2-D CUDA tensor, got ", x.sizes(), " on ",
             x.device().str());
}

int act_code(BlockAct act) {
  switch (act) {
    case BlockAct::kNone: return FP8T_ACT_NONE;
    case BlockAct::kGelu: return FP8T_ACT_GELU;
    case BlockAct::kDgelu: return FP8T_ACT_DGELU;
  }
  return -1;
}

const char* act_name(BlockAct act) {
  return act == BlockAct::kGelu ? "gelu " : (act == BlockAct::kDgelu ? "gelu-backward " : "");
}

}  // namespace

BlockQuantized block_quantize_cuda(const at::Tensor& x_in, int block_rows, bool rowwise, bool columnwise,
                                   bool power_of_2) {
  check_input(x_in, "block quantize");
  FP8T_CHECK(block_rows == 1 || block_rows == kBlockLen, "block quantize: block_rows must be 1 or 128, got ",
             block_rows);
  const c10::cuda::CUDAGuard guard(x_in.device());
  // The kernels read fp32 or bf16; fp16/fp64 are cast as fp32 (block_quantize.h says why that is exact).
  const at::ScalarType t = x_in.scalar_type();
  const at::Tensor x = (t == at::kFloat || t == at::kBFloat16 ? x_in : x_in.to(at::kFloat)).contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  BlockQuantized q = allocate_layouts(x, block_rows, rowwise, columnwise);
  const auto launch = block_rows == 1 ? fp8t_block_quantize_1x128 : fp8t_block_quantize_128x128;
  FP8T_KERNEL_CHECK(launch(x.data_ptr(), cuda::dtype_code(x), rows, cols, power_of_2 ? 1 : 0, codes_ptr(q.rowwise),
                           scales_ptr(q.rowwise), codes_ptr(q.columnwise), scales_ptr(q.columnwise),
                           cuda::stream_of(x)),
                    "fp8 block cast (", block_rows == 1 ? "1x128" : "128x128", ") of ", x.scalar_type(), " ",
                    x.sizes());
  return q;
}

BlockQuantized block_quantize_act_cuda(BlockAct act, const at::Tensor& x_in, const at::Tensor& h_in, bool rowwise,
                                       bool columnwise, bool power_of_2, at::Tensor* dbias) {
  check_input(x_in, "fused block cast");
  const at::ScalarType t = x_in.scalar_type();
  FP8T_CHECK(t == at::kFloat || t == at::kBFloat16, "fused block cast: the input must be fp32 or bf16, got ", t);
  FP8T_CHECK((act == BlockAct::kDgelu) == h_in.defined(), "fused block cast: the GELU input comes with the backward only");
  FP8T_CHECK(!h_in.defined() || (h_in.sizes() == x_in.sizes() && h_in.scalar_type() == t && h_in.is_cuda()),
             "fused block cast: the GELU input ", h_in.sizes(), " must match dy ", x_in.sizes(), " in shape and dtype");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor h = h_in.defined() ? h_in.contiguous() : at::Tensor();
  const int64_t rows = x.size(0), cols = x.size(1);
  BlockQuantized q = allocate_layouts(x, 1, rowwise, columnwise);
  at::Tensor workspace;
  if (dbias != nullptr) {
    *dbias = at::empty({cols}, cuda::floats_on(x));
    const int64_t n = static_cast<int64_t>(fp8t_block_quantize_workspace_bytes(rows, cols) / sizeof(float));
    workspace = at::empty({n}, cuda::floats_on(x));
  }
  FP8T_KERNEL_CHECK(fp8t_block_quantize_act(act_code(act), x.data_ptr(), h.defined() ? h.data_ptr() : nullptr,
                                            cuda::dtype_code(x), rows, cols, power_of_2 ? 1 : 0, codes_ptr(q.rowwise),
                                            scales_ptr(q.rowwise), codes_ptr(q.columnwise), scales_ptr(q.columnwise),
                                            dbias != nullptr ? dbias->data_ptr<float>() : nullptr,
                                            workspace.defined() ? workspace.data_ptr() : nullptr, cuda::stream_of(x)),
                    "fp8 ", act_name(act), "block cast (1x128) of ", t, " ", x.sizes());
  return q;
}

}  // namespace fp8
}  // namespace fp8t
