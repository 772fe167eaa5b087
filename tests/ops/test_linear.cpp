// lib/ops/linear.*: the plain model's Linear. On the CPU (and without autocast) it is at::linear,
// bit for bit. Under CUDA autocast (bf16 and fp16) its output and input gradient are autocast's
// at::linear's, and its weight and bias gradients come out of the GEMM in FP32: closer to a
// float64 reference than autocast's 16-bit-rounded ones.
#include "lib/ops/linear.h"

#include <torch/torch.h>  // backward

#include "lib/util/torch_compat.h"  // compat::AutocastGuard
#include "tests/catch.h"
#if defined(FP8T_WITH_CUDA)
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU
#endif

namespace {

struct Result {
  at::Tensor y, dx, dw, db;
};

// y = linear(x, w, b) over x [2, 48, 96] (3-D, as in the model), w [80, 96], b [80]; backward
// from a fixed upstream gradient. `use_op`: ops::linear, else at::linear. Without `with_bias` the
// bias is an undefined tensor (a bias-free Linear, a tied head) and db stays undefined.
Result run(bool use_op, const at::Device& device, at::ScalarType autocast, bool with_bias = true) {
  at::manual_seed(11);
  const at::Tensor x0 = at::randn({2, 48, 96}), w0 = at::randn({80, 96}) * 0.1, b0 = at::randn({80}) * 0.1;
  const at::Tensor up = at::randn({2, 48, 80});
  at::Tensor x = x0.to(device).requires_grad_(), w = w0.to(device).requires_grad_(),
             b = b0.to(device).requires_grad_();
  at::Tensor y;
  {
    fp8t::compat::AutocastGuard guard(device.type(), autocast);
    const at::Tensor bias = with_bias ? b : at::Tensor();
    y = use_op ? fp8t::ops::linear(x, w, bias) : at::linear(x, w, bias);
  }
  y.backward(up.to(device).to(y.scalar_type()));
  return {y.detach().cpu(), x.grad().cpu(), w.grad().cpu(), with_bias ? b.grad().cpu() : at::Tensor()};
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).norm().item<double>() / want.norm().item<double>();
}

}  // namespace

TEST_CASE("ops::linear on the CPU is at::linear, bit for bit, with or without autocast", "[ops]") {
  for (at::ScalarType autocast : {at::kFloat, at::kBFloat16}) {
    CAPTURE(autocast);
    const Result op = run(true, at::kCPU, autocast), ref = run(false, at::kCPU, autocast);
    CHECK(at::equal(op.y, ref.y));
    CHECK(at::equal(op.dx, ref.dx));
    CHECK(at::equal(op.dw, ref.dw));
    CHECK(at::equal(op.db, ref.db));
    const Result no_bias = run(true, at::kCPU, autocast, false), no_bias_ref = run(false, at::kCPU, autocast, false);
    CHECK(at::equal(no_bias.y, no_bias_ref.y));
    CHECK(at::equal(no_bias.dw, no_bias_ref.dw));
  }
  const at::Tensor x = at::randn({4, 8}).requires_grad_(), w = at::randn({3, 8});
  fp8t::compat::AutocastGuard guard(at::kCPU, at::kBFloat16);
  CHECK_FALSE(fp8t::ops::linear_fp32_wgrad(x, w));  // CPU: never the CUDA path
}

#if defined(FP8T_WITH_CUDA)
TEST_CASE("ops::linear under CUDA autocast: autocast's output and dx, FP32 weight and bias gradients",
          "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType autocast : {at::kBFloat16, at::kHalf}) {
    CAPTURE(autocast);
    const at::Device cuda(at::kCUDA, 0);
    {
      const at::Tensor x = at::randn({4, 8}, at::TensorOptions().device(cuda)).requires_grad_();
      const at::Tensor w = at::randn({3, 8}, at::TensorOptions().device(cuda));
      fp8t::compat::AutocastGuard guard(at::kCUDA, autocast);
      REQUIRE(fp8t::ops::linear_fp32_wgrad(x, w));
      CHECK_FALSE(fp8t::ops::linear_fp32_wgrad(x, w.to(at::kBFloat16)));  // a 16-bit weight: at::linear
      torch::NoGradGuard no_grad;
      CHECK_FALSE(fp8t::ops::linear_fp32_wgrad(x, w));  // no gradient: at::linear
    }
    const Result op = run(true, cuda, autocast), ref = run(false, cuda, autocast);
    // The forward is the same GEMM on the same autocast operands: the same bits.
    REQUIRE(op.y.scalar_type() == autocast);
    CHECK(at::equal(op.y, ref.y));
    // dx: the same dgrad GEMM; autocast may route a 3-D input through another fold, so allow one
    // 16-bit rounding (2^-8 relative, Frobenius).
    CHECK(rel_err(op.dx.to(at::kFloat), ref.dx.to(at::kDouble)) <= std::ldexp(1.0, -8));
    // dW and db against float64 (from the autocast operands, which are exact in float64): the FP32
    // GEMM output is off by FP32 accumulation over 96 rows (< 1e-6 relative); autocast's dW was
    // rounded to 16 bits (about 2^-9 relative): at least 10x further.
    at::manual_seed(11);
    const at::Tensor x0 = at::randn({2, 48, 96}), w0 = at::randn({80, 96}) * 0.1, b0 = at::randn({80}) * 0.1;
    const at::Tensor up = at::randn({2, 48, 80});
    const at::Tensor xh = x0.to(autocast).to(at::kDouble).reshape({-1, 96});
    const at::Tensor dyh = up.to(autocast).to(at::kDouble).reshape({-1, 80});
    const at::Tensor dw_ref = dyh.t().mm(xh), db_ref = dyh.sum(0);
    REQUIRE(op.dw.scalar_type() == at::kFloat);
    const double op_err = rel_err(op.dw, dw_ref), autocast_err = rel_err(ref.dw, dw_ref);
    CAPTURE(op_err, autocast_err);
    CHECK(op_err <= 1e-6);
    CHECK(op_err * 10.0 <= autocast_err);
    CHECK(rel_err(op.db, db_ref) <= 1e-6);
    // Without a bias (an undefined tensor, as a tied head passes): the same y and dW, no db.
    const Result no_bias = run(true, cuda, autocast, /*with_bias=*/false);
    const Result no_bias_ref = run(false, cuda, autocast, /*with_bias=*/false);
    CHECK(at::equal(no_bias.y, no_bias_ref.y));
    CHECK(at::equal(no_bias.dw, op.dw));  // the bias does not enter dW
  }
}
#endif
