// lib/fp8/backends/backend.cpp: transposed(), the columnwise copy of an operand made from its rowwise codes
// (train.recompute casts: dgrad's transposed weight), on the CPU emulation.
#include "lib/fp8/backends/backend.h"

#include <torch/torch.h>  // torch::randn

#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/fp8/backends/block_backend.h"   // block_quantize_operands
#include "lib/fp8/backends/block_quantize.h"  // has_block_scale_layout
#include "tests/catch.h"

using namespace fp8t::fp8;

namespace {

// Edge shapes: one row, rows and columns off the 16- and 128-multiples, several 128-blocks.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 16}, {5, 160}, {217, 256}, {130, 300}};

void require_same_operand(const Fp8Operand& t, const Fp8Operand& expected) {
  REQUIRE(t.format == expected.format);
  REQUIRE(t.scale_layout == expected.scale_layout);
  REQUIRE(at::equal(t.codes, expected.codes));
  REQUIRE(t.scale_inv.sizes() == expected.scale_inv.sizes());
  REQUIRE(at::equal(t.scale_inv, expected.scale_inv));
}

}  // namespace

TEST_CASE("transposed: the per-tensor columnwise copy a cast of both layouts writes, bit for bit", "[fp8]") {
  for (const auto& [rows, cols] : kShapes) {
    INFO("shape " << rows << "x" << cols);
    const at::Tensor x = torch::randn({rows, cols}) * 5.0;
    const SlotRef slot{at::full({}, 7.5f), at::zeros({}), Format::kE4M3, 0};
    const Fp8Tensor both = backend_for(at::kCPU).quantize(x, slot, true, true);
    const Fp8Operand t = transposed(both.rowwise);
    require_same_operand(t, both.columnwise);
    REQUIRE(t.codes.is_contiguous());
  }
}

TEST_CASE("transposed: a 128x128 block operand gives the cast's columnwise codes and block grid", "[fp8]") {
  for (const bool pow2 : {true, false}) {
    for (const auto& [rows, cols] : kShapes) {
      INFO("shape " << rows << "x" << cols << ", power-of-2 scales " << pow2);
      // Rows of very different magnitudes, so the block scales differ.
      const at::Tensor x = torch::randn({rows, cols}) * at::exp(torch::randn({rows, 1}) * 3.0);
      const Fp8Tensor both = block_quantize_operands(x, 128, true, true, pow2);
      const Fp8Operand t = transposed(both.rowwise);
      require_same_operand(t, both.columnwise);
      REQUIRE(has_block_scale_layout(t.scale_inv, cols, rows, 128));
    }
  }
}

TEST_CASE("transposed: a 1x128 operand is refused (its blocks run along K)", "[fp8]") {
  const Fp8Tensor q = block_quantize_operands(torch::randn({4, 256}), 1, true, false, true);
  REQUIRE_THROWS_WITH(transposed(q.rowwise), FP8T_CONTAINS("1x128"));
}
