// lib/fp8/backends/backend.cpp's transposed() on the CUDA backend (kernels/cast_transpose.cu's code
// transpose): the columnwise copy the GPU casts write, and the CPU emulation's, bit for bit.
#include <torch/torch.h>  // torch::randn

#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/fp8/backends/backend.h"        // transposed, backend_for
#include "lib/fp8/backends/block_backend.h"  // block_quantize_operands
#include "tests/catch.h"

using namespace fp8t::fp8;

TEST_CASE("transposed on CUDA: per-tensor and 128x128 operands equal the casts' columnwise copies", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  // Edge shapes and one of several tiles per block of the transpose kernel.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 16}, {5, 160}, {217, 256}, {2048, 2048}};
  for (const auto& [rows, cols] : shapes) {
    INFO("shape " << rows << "x" << cols);
    const at::Tensor x = (torch::randn({rows, cols}) * at::exp(torch::randn({rows, 1}) * 3.0)).to(gpu);
    const SlotRef slot{at::full({}, 7.5f, at::TensorOptions().device(gpu)),
                       at::zeros({}, at::TensorOptions().device(gpu)), Format::kE4M3, 0};
    const Fp8Tensor both = backend_for(gpu).quantize(x, slot, true, true);
    const Fp8Operand t = transposed(both.rowwise);
    REQUIRE(t.codes.is_cuda());
    REQUIRE(at::equal(t.codes, both.columnwise.codes));
    REQUIRE(at::equal(t.scale_inv, both.columnwise.scale_inv));
    REQUIRE(at::equal(t.codes.cpu(), transposed(Fp8Operand{both.rowwise.codes.cpu(), both.rowwise.scale_inv.cpu(),
                                                           both.rowwise.format, both.rowwise.scale_layout})
                                         .codes));
    const Fp8Tensor blocks = block_quantize_operands(x, 128, true, true, true);
    const Fp8Operand bt = transposed(blocks.rowwise);
    REQUIRE(at::equal(bt.codes, blocks.columnwise.codes));
    REQUIRE(at::equal(bt.scale_inv, blocks.columnwise.scale_inv));
  }
}
