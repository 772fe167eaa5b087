// lib/fp8/backends/backend.cpp: transposed(), the columnwise copy of an operand made from its rowwise codes
// (train.recompute casts: dgrad's transposed weight), and Backend::quantize's routing of the fused cast
// sources, on the CPU emulation.
#include "lib/fp8/backends/backend.h"

#include <torch/torch.h>  // torch::randn

#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/fp8/backends/block_backend.h"   // block_quantize_operands
#include "lib/fp8/backends/block_quantize.h"  // has_block_scale_layout
#include "lib/fp8/backends/swiglu_ops.h"      // swiglu_value, swiglu_gradient
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

// Backend::quantize of a fused source on the CPU emulation: the codes, scale_inv, amax and dbias of
// a plain cast of the operator's LibTorch value, in the layouts the source gives (a forward source
// the asked ones, a gradient source both); a source routed to the wrong operation casts another
// value and fails. Exact comparisons: both sides round the same FP32 values with the same scale.
TEST_CASE("Backend::quantize: each fused source casts its operator's value, in its layouts", "[fp8]") {
  Backend& cpu = backend_for(at::kCPU);
  at::manual_seed(53);
  const at::Tensor h = torch::randn({6, 32}) * 3.0, dy = torch::randn({6, 32}), dy_half = torch::randn({6, 16});
  const auto slot = [] { return SlotRef{at::full({}, 8.0f), at::full({}, 0.5f), Format::kE4M3, 0}; };
  const auto require_same_cast = [&](const CastSource& src, const QuantizeOptions& opt, const at::Tensor& value,
                                     bool gradient) {
    SlotRef got_slot = slot(), want_slot = slot();
    at::Tensor got_dbias, want_dbias;
    QuantizeOptions o = opt;
    if (gradient) o.dbias = &got_dbias;
    const Fp8Tensor got = cpu.quantize(src, got_slot, o);
    const Fp8Tensor want = gradient ? cpu.quantize_grad(value, want_slot, true, &want_dbias)
                                    : cpu.quantize(value, want_slot, opt.rowwise, opt.columnwise);
    REQUIRE(got.rowwise.defined() == want.rowwise.defined());
    REQUIRE(got.columnwise.defined() == want.columnwise.defined());
    if (want.rowwise.defined()) require_same_operand(got.rowwise, want.rowwise);
    if (want.columnwise.defined()) require_same_operand(got.columnwise, want.columnwise);
    REQUIRE(at::equal(got_slot.amax, want_slot.amax));
    if (gradient) REQUIRE(at::equal(got_dbias, want_dbias));
  };
  const QuantizeOptions rowwise_only{true, false, nullptr, {}};
  require_same_cast(CastSource::gelu(h), rowwise_only, at::gelu(h, "tanh"), false);
  require_same_cast(CastSource::swiglu(h), rowwise_only, swiglu_value(h), false);
  require_same_cast(CastSource::dgelu(dy, h), rowwise_only, at::gelu_backward(dy, h, "tanh"), true);
  require_same_cast(CastSource::dswiglu(dy_half, h), rowwise_only, swiglu_gradient(dy_half, h), true);
  require_same_cast(CastSource::tensor(dy), rowwise_only, dy, true);
  REQUIRE_FALSE(at::equal(at::gelu(h, "tanh"), h));  // the sources' values differ from their inputs
}

TEST_CASE("Backend::quantize: a SwiGLU gradient cast with the value companion adds the value's columnwise codes",
          "[fp8]") {
  Backend& cpu = backend_for(at::kCPU);
  at::manual_seed(7);
  const at::Tensor h = torch::randn({5, 64}) * 2.0, dy = torch::randn({5, 32});
  SlotRef grad{at::full({}, 64.0f), at::zeros({}), Format::kE5M2, 1};
  SlotRef value{at::full({}, 16.0f), at::full({}, 0.25f), Format::kE4M3, 2};
  Fp8Operand value_columnwise;
  const Fp8Tensor got =
      cpu.quantize(CastSource::dswiglu(dy, h), grad, {true, true, nullptr, {value, &value_columnwise}});
  SlotRef grad_alone{at::full({}, 64.0f), at::zeros({}), Format::kE5M2, 1};
  const Fp8Tensor want = cpu.quantize(CastSource::dswiglu(dy, h), grad_alone, {false, false, nullptr, {}});
  require_same_operand(got.rowwise, want.rowwise);
  require_same_operand(got.columnwise, want.columnwise);
  REQUIRE(at::equal(grad.amax, grad_alone.amax));
  SlotRef value_alone{at::full({}, 16.0f), at::zeros({}), Format::kE4M3, 2};
  require_same_operand(value_columnwise, cpu.quantize(swiglu_value(h), value_alone, false, true).columnwise);
  REQUIRE(value.amax.item<float>() == 0.25f);  // the value's slot records nothing
  SlotRef any{at::full({}, 1.0f), at::zeros({}), Format::kE4M3, 3};
  REQUIRE_THROWS_WITH(cpu.quantize(CastSource::gelu(h), any, {true, true, nullptr, {value, &value_columnwise}}),
                      FP8T_CONTAINS("only a SwiGLU gradient cast"));
}
