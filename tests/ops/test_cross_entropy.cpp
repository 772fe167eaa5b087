// lib/ops/cross_entropy.*: on the CPU exactly ATen's composition (bits of the loss and of the
// gradient) and a gradient equal to (softmax - onehot) / rows; clear errors; on CUDA the fused
// kernels against the CPU result on the same values, through autograd (the [cuda] cases run
// detail::cross_entropy_cuda, lib/ops/cross_entropy_cuda.cpp, for CUDA logits).
#include "lib/ops/cross_entropy.h"

#include <torch/torch.h>  // torch::autograd (backward), at::one_hot

#include <cmath>    // std::ldexp, std::fabs
#include <cstdio>   // std::printf
#include <cstring>  // std::memcpy
#include <vector>   // std::vector

#include "lib/util/error.h"  // fp8t::Error
#include "tests/catch.h"
#if defined(FP8T_WITH_CUDA)
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, on_cuda, dtype_name, reporting
#endif

namespace {

using fp8t::ops::cross_entropy;

// Today's loss expression, the CPU reference.
at::Tensor aten_reference(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
}

uint32_t bits_of(const at::Tensor& scalar) {
  const float f = scalar.item<float>();
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

at::Tensor leaf(const at::Tensor& values) { return values.detach().clone().requires_grad_(true); }

// GPT-like logits (N(0, 2^2)) and in-range targets.
std::pair<at::Tensor, at::Tensor> make_inputs(at::IntArrayRef lead, int64_t vocab, at::ScalarType dt, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<int64_t> shape(lead.begin(), lead.end());
  shape.push_back(vocab);
  at::Tensor logits = (at::randn(shape) * 2.0).to(dt);
  at::Tensor targets = at::randint(0, vocab, lead, at::kLong);
  return {logits, targets};
}

// (softmax - onehot) / rows in float64 from the exact logit values, and p / rows (the scale of
// the gradient's rounding error).
std::pair<at::Tensor, at::Tensor> float64_grad(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t vocab = logits.size(-1);
  const at::Tensor x = logits.detach().to(at::kDouble).reshape({-1, vocab});
  const double rows = static_cast<double>(x.size(0));
  const at::Tensor p = at::softmax(x, 1);
  const at::Tensor onehot = at::one_hot(targets.reshape({-1}), vocab).to(at::kDouble);
  return {((p - onehot) / rows).view(logits.sizes()), (p / rows).view(logits.sizes())};
}

// max over elements of |got - want| / tol, tol = rel_p * p_scale + abs + rel_out * |want|.
double worst(const at::Tensor& got, const at::Tensor& want, const at::Tensor& p_scale, double rel_p, double abs,
             double rel_out) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  const at::Tensor tol = p_scale.to(at::kDouble) * rel_p + abs + w.abs() * rel_out;
  return ((g - w).abs() / tol).max().item<double>();
}

}  // namespace

TEST_CASE("ops::cross_entropy on the CPU is ATen's expression, bit for bit", "[ops]") {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    for (int64_t vocab : {int64_t{1}, int64_t{33}, int64_t{257}}) {
      CAPTURE(c10::toString(dt), vocab);
      const auto [values, targets] = make_inputs({3, 7}, vocab, dt, static_cast<uint64_t>(vocab));
      at::Tensor a = leaf(values), b = leaf(values);
      const at::Tensor loss = cross_entropy(a, targets);
      const at::Tensor ref = aten_reference(b, targets);
      REQUIRE(loss.dim() == 0);
      REQUIRE(loss.scalar_type() == at::kFloat);
      REQUIRE(bits_of(loss) == bits_of(ref));
      loss.backward();
      ref.backward();
      REQUIRE(a.grad().scalar_type() == dt);
      REQUIRE(a.grad().sizes() == values.sizes());
      REQUIRE(at::equal(a.grad(), b.grad()));
    }
  }
}

TEST_CASE("ops::cross_entropy on the CPU: gradient is (softmax - onehot) / rows", "[ops]") {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    CAPTURE(c10::toString(dt));
    const auto [values, targets] = make_inputs({4, 9}, 300, dt, 12);
    at::Tensor x = leaf(values);
    cross_entropy(x, targets).backward();
    const auto [want, p_scale] = float64_grad(values, targets);
    // FP32 log_softmax: log p = (x - max) - log(sum) carries about an ulp of a value below 32
    // (2e-6) and exp adds ~1 ulp, so p is good to ~3e-6 relative (allowed 1e-5 of p / rows);
    // subtracting the one-hot adds half an ulp of 1 (6e-8, allowed 1e-7 / rows). bf16 gradients are
    // rounded once more, by at most half an ulp of an 8-bit significand (2^-8 relative).
    const double rows = 36.0;
    const double err = worst(x.grad(), want, p_scale, 1e-5, 1e-7 / rows, dt == at::kFloat ? 0.0 : std::ldexp(1.0, -8));
    CAPTURE(err);
    REQUIRE(err <= 1.0);
  }
}

TEST_CASE("ops::cross_entropy: flat and non-int64 targets, vocab 1", "[ops]") {
  const auto [values, targets] = make_inputs({2, 5}, 17, at::kFloat, 4);
  const at::Tensor ref = aten_reference(values, targets);
  REQUIRE(bits_of(cross_entropy(values, targets.reshape({-1}))) == bits_of(ref));
  REQUIRE(bits_of(cross_entropy(values, targets.to(at::kInt))) == bits_of(ref));
  // One class: every probability is 1, the loss and the gradient are 0.
  at::Tensor one = leaf(at::randn({4, 1}));
  const at::Tensor loss = cross_entropy(one, at::zeros({4}, at::kLong));
  REQUIRE(loss.item<float>() == 0.0f);
  loss.backward();
  REQUIRE(at::equal(one.grad(), at::zeros({4, 1})));
}

TEST_CASE("ops::cross_entropy: errors name the shapes and types", "[ops]") {
  const at::Tensor logits = at::randn({2, 3, 5});
  REQUIRE_THROWS_AS(cross_entropy(logits, at::zeros({2, 4}, at::kLong)), fp8t::Error);
  REQUIRE_THROWS_WITH(cross_entropy(logits, at::zeros({2, 4}, at::kLong)), FP8T_CONTAINS("[2, 3, 5]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, at::zeros({2, 4}, at::kLong)), FP8T_CONTAINS("got [2, 4]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, at::zeros({3, 2}, at::kLong)), FP8T_CONTAINS("targets of shape [2, 3]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, at::zeros({2, 3}, at::kFloat)), FP8T_CONTAINS("integer class indices"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, at::zeros({2, 3}, at::kBool)), FP8T_CONTAINS("integer class indices"));
  REQUIRE_THROWS_WITH(cross_entropy(at::zeros({2, 3}, at::kLong), at::zeros({2}, at::kLong)),
                      FP8T_CONTAINS("floating-point"));
  REQUIRE_THROWS_WITH(cross_entropy(at::randn({}), at::zeros({}, at::kLong)), FP8T_CONTAINS("[..., vocab]"));
  REQUIRE_THROWS_WITH(cross_entropy(at::randn({4, 0}), at::zeros({4}, at::kLong)), FP8T_CONTAINS("vocab >= 1"));
  // The shape checks come first: a matching flat [rows] is fine, a flat one of another length is not.
  REQUIRE_NOTHROW(cross_entropy(logits, at::zeros({6}, at::kLong)));
  REQUIRE_THROWS_WITH(cross_entropy(logits, at::zeros({5}, at::kLong)), FP8T_CONTAINS("(or [6])"));
}

#if defined(FP8T_WITH_CUDA)

TEST_CASE("ops::cross_entropy on CUDA matches the CPU result, loss and gradient", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  struct Case {
    at::ScalarType dt;
    int64_t batch, seq, vocab;
    bool transposed;  // logits given as a non-contiguous view
  };
  const std::vector<Case> cases = {
      {at::kFloat, 2, 37, 65, false},      {at::kBFloat16, 2, 37, 65, false},
      {at::kFloat, 3, 11, 50257, false},   {at::kBFloat16, 3, 11, 50257, false},
      {at::kBFloat16, 2, 8, 50304, false}, {at::kBFloat16, 2, 19, 3000, true},
      {at::kFloat, 2, 19, 3000, true},     {at::kHalf, 2, 13, 1000, false},
      {at::kDouble, 2, 13, 1000, true},
  };
  for (const Case& c : cases) {
    CAPTURE(fp8t::test::dtype_name(c.dt), c.batch, c.seq, c.vocab, c.transposed);
    const auto [values, targets] = make_inputs({c.batch, c.seq}, c.vocab, c.dt, static_cast<uint64_t>(c.vocab + c.seq));
    const double upstream = 2.5;  // d(total)/d(loss) != 1: the kernel must use the incoming gradient

    at::Tensor x_cpu = leaf(values);
    const at::Tensor ref = cross_entropy(x_cpu, targets);
    (ref * upstream).backward();

    // The same values on the GPU, optionally as a transposed view of a [B, V, T] tensor.
    at::Tensor x_gpu;
    if (c.transposed) {
      x_gpu = values.transpose(1, 2).contiguous().cuda().requires_grad_(true);
    } else {
      x_gpu = values.cuda().requires_grad_(true);
    }
    const at::Tensor logits_gpu = c.transposed ? x_gpu.transpose(1, 2) : x_gpu;
    REQUIRE(logits_gpu.is_contiguous() == !c.transposed);
    const at::Tensor loss = cross_entropy(logits_gpu, targets.cuda());
    REQUIRE(loss.is_cuda());
    REQUIRE(loss.dim() == 0);
    REQUIRE(loss.scalar_type() == at::kFloat);
    // Per-row losses agree to ~1e-6 relative (FP32 both, different exp and summation order); the
    // mean over rows adds rounding of its own order. 1e-5 relative.
    const double got = loss.item<double>(), want = ref.item<double>();
    CAPTURE(got, want);
    REQUIRE(std::fabs(got - want) <= 1e-5 * std::fabs(want));

    (loss * upstream).backward();
    at::Tensor grad = x_gpu.grad();
    if (c.transposed) grad = grad.transpose(1, 2);
    REQUIRE(grad.scalar_type() == c.dt);
    REQUIRE(grad.sizes() == values.sizes());
    // Both sides compute p in FP32 to ~1e-5 of p (see the kernel test), so they may differ by
    // 3e-5 * p * upstream / rows. Near the one-hot entry (value ~ upstream / rows) each side rounds
    // about three times at 2^-24 relative (the scale, the subtraction, the product): 3e-7.
    // Outputs rounded to bf16 / fp16 from slightly different FP32 values can land one ulp apart
    // (2^-7 / 2^-10 relative); fp16 values this small may be subnormal (ulp 2^-24).
    const at::Tensor p_scale = float64_grad(values, targets).second;
    const double rows = static_cast<double>(c.batch * c.seq);
    double rel_out = 0.0, abs = 3e-7 * upstream / rows;
    if (c.dt == at::kBFloat16) rel_out = std::ldexp(1.0, -7);
    if (c.dt == at::kHalf) {
      rel_out = std::ldexp(1.0, -10);
      abs += std::ldexp(1.0, -24);
    }
    const double err = worst(grad.cpu(), x_cpu.grad(), p_scale * upstream, 3e-5, abs, rel_out);
    CAPTURE(err);
    REQUIRE(err <= 1.0);
    if (fp8t::test::reporting()) {
      std::printf("ops::cross_entropy %s [%ld, %ld, %ld]: |loss - cpu| %.2e, grad error / tolerance %.3f\n",
                  fp8t::test::dtype_name(c.dt).c_str(), static_cast<long>(c.batch), static_cast<long>(c.seq),
                  static_cast<long>(c.vocab), std::fabs(got - want), err);
    }
  }
}

TEST_CASE("ops::cross_entropy on CUDA: kOverwriteLogits gives the same gradient in the logits' memory",
          "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  using fp8t::ops::LogitsAfterBackward;
  for (const at::ScalarType dt : {at::kBFloat16, at::kFloat, at::kHalf}) {
    CAPTURE(fp8t::test::dtype_name(dt));
    const auto [values, targets] = make_inputs({4, 33}, 50304, dt, 7);
    const at::Tensor t = targets.cuda();
    auto grad_of = [&](LogitsAfterBackward mode, at::Tensor* logits_out) {
      at::Tensor x = values.cuda().requires_grad_(true);
      at::Tensor logits = x * 1.0;  // a non-leaf, as the head's output is
      (cross_entropy(logits, t, mode) * 3.0).backward();
      if (logits_out != nullptr) *logits_out = logits.detach();
      return x.grad();
    };
    const at::Tensor kept = grad_of(LogitsAfterBackward::kKeep, nullptr);
    at::Tensor overwritten_logits;
    const at::Tensor overwritten = grad_of(LogitsAfterBackward::kOverwriteLogits, &overwritten_logits);
    // The same kernel on the same values: bit for bit.
    REQUIRE(at::equal(kept, overwritten));
    if (dt != at::kHalf) {
      // bf16 / fp32 logits are read as they are: their memory now holds their gradient (x.grad is
      // that gradient times 1.0, exact).
      REQUIRE(at::equal(overwritten_logits, kept));
    } else {
      // fp16 logits go through an FP32 copy; the copy is overwritten, the logits are not.
      REQUIRE(at::equal(overwritten_logits, values.cuda()));
    }
  }
}

TEST_CASE("ops::cross_entropy on CUDA: an out-of-range target gives NaN, not a device assert", "[ops][cuda]") {
  FP8T_REQUIRE_GPU();
  at::Tensor x = at::randn({4, 10}, fp8t::test::on_cuda(at::kFloat)).requires_grad_(true);
  at::Tensor t = at::zeros({4}, fp8t::test::on_cuda(at::kLong));
  t[2] = 10;
  const at::Tensor loss = cross_entropy(x, t);
  REQUIRE(std::isnan(loss.item<float>()));
  loss.backward();
  const at::Tensor g = x.grad().cpu();
  REQUIRE(at::isnan(g[2]).all().item<bool>());
  REQUIRE(at::isfinite(g[0]).all().item<bool>());
  // The GPU is still usable (a device assert would leave a sticky error and throw here).
  REQUIRE_NOTHROW(torch::cuda::synchronize());
}

#endif  // FP8T_WITH_CUDA
