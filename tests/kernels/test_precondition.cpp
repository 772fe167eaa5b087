// kernels/precondition.cu on the GPU: a launcher precondition that fails inside a real call
// reaches the caller as an fp8t::Error naming the op, the shapes and the failed check, and leaves
// the device usable.
#if defined(FP8T_WITH_CUDA)

#include <string>  // std::string

#include "fp8t_kernels.h"                   // fp8t_norm_backward
#include "lib/fp8/backends/cuda_backend.h"  // cuda_backend
#include "lib/util/cuda_tensors.h"          // FP8T_KERNEL_CHECK, stream_of
#include "tests/kernels/cuda_test_util.h"

namespace {

using namespace fp8t::test;

fp8t::fp8::SlotRef cuda_slot() {
  fp8t::fp8::SlotRef s;
  s.scale = at::full({}, 2.0f, on_cuda(at::kFloat));
  s.amax = at::zeros({}, on_cuda(at::kFloat));
  s.index = 3;
  return s;
}

}  // namespace

TEST_CASE("kernel preconditions: a cast+transpose taller than the grid fails with op, shape and check",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  const fp8t::fp8::SlotRef slot = cuda_slot();
  // 65536 row tiles of 64: one more than gridDim.y allows.
  const at::Tensor tall = at::zeros({64 * 65535 + 1, 1}, on_cuda(at::kFloat));
  std::string message;
  try {
    gpu.quantize(tall, slot, /*rowwise=*/true, /*columnwise=*/true);
  } catch (const fp8t::Error& e) {
    message = e.what();
  }
  INFO(message);
  REQUIRE_THAT(message, FP8T_CONTAINS("fp8 cast+transpose of Float [4194241, 1] (slot 3): precondition failed: "));
  REQUIRE_THAT(message, FP8T_CONTAINS("fp8t_cast_transpose_act: rows need more than 65535 tiles of 64"));
  REQUIRE_THAT(message, FP8T_CONTAINS("(failed check: n_tiles(rows) <= kMaxRowTiles)"));
  // Nothing was launched: the device is fine and the next cast works.
  const fp8t::fp8::Fp8Tensor ok = gpu.quantize(at::ones({64, 32}, on_cuda(at::kFloat)), slot, true, true);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(ok.columnwise.codes.sizes() == at::IntArrayRef({32, 64}));
}

TEST_CASE("kernel preconditions: a misaligned device workspace is named", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor x = at::randn({4, 16}, on_cuda(at::kFloat));
  const at::Tensor stats = at::ones({4}, on_cuda(at::kFloat));
  const at::Tensor gamma = at::ones({16}, on_cuda(at::kFloat));
  at::Tensor dx = at::empty_like(x), dgamma = at::empty_like(gamma);
  at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_norm_backward_workspace_bytes(4, 16)) + 16}, on_cuda(at::kByte));
  std::string message;
  try {
    FP8T_KERNEL_CHECK(fp8t_norm_backward(x.data_ptr(), FP8T_DTYPE_F32, x.data_ptr(), FP8T_DTYPE_F32, 4, 16,
                                         gamma.data_ptr<float>(), stats.data_ptr<float>(), stats.data_ptr<float>(), 0,
                                         dx.data_ptr(), dgamma.data_ptr<float>(), nullptr,
                                         ws.data_ptr<uint8_t>() + 4, fp8t::cuda::stream_of(x)),
                      "LayerNorm backward of ", x.sizes());
  } catch (const fp8t::Error& e) {
    message = e.what();
  }
  INFO(message);
  REQUIRE_THAT(message, FP8T_CONTAINS("LayerNorm backward of [4, 16]: precondition failed: fp8t_norm_backward: "
                                      "the workspace is not 16-byte aligned"));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

#endif  // FP8T_WITH_CUDA
