// AdamW::track_abs_max (lib/optim/optimizer.h) and AdamWBatch::amaxes (lib/optim/adamw_step.h) on
// the CPU: the amax each step writes is max|p| of the updated parameter exactly (a max has no
// rounding), NaN elements ignored and inf counted, also on a skipped step; what cannot be tracked
// says so. The CUDA kernel is compared with this loop in test_adamw_step_cuda.cpp.
#include <torch/torch.h>

#include <cmath>   // std::nanf, INFINITY
#include <vector>  // std::vector

#include "lib/optim/adamw_step.h"  // adamw_multi_tensor_step, AdamWBatch
#include "lib/optim/optimizer.h"   // AdamW
#include "lib/util/error.h"        // fp8t::Error
#include "tests/catch.h"

using namespace fp8t;
using optim::AdamW;
using optim::AdamWOptions;

namespace {

// max|t|, NaN elements counted as 0 (amax_combine), by ATen.
float reference_amax(const at::Tensor& t) {
  const at::Tensor a = t.detach().abs();
  return a.masked_fill(a.isnan(), 0.0f).max().item<float>();
}

float value(const at::Tensor& t) { return t.item<float>(); }

AdamWOptions options(MomentsDtype moments) {
  AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  o.moments_dtype = moments;
  return o;
}

}  // namespace

TEST_CASE("AdamW amax: a tracked parameter's amax is max|p| of each step's result, for both moments dtypes",
          "[optim]") {
  const MomentsDtype moments = GENERATE(MomentsDtype::kFp32, MomentsDtype::kBf16);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  at::Tensor w = at::randn({37, 53}, gen).requires_grad_();  // odd sizes
  at::Tensor b = at::randn({53}, gen).requires_grad_();
  AdamW opt({{"w", w}, {"b", b}}, options(moments));
  const at::Tensor amax = at::full({}, -1.0f);
  int updates = 0;
  REQUIRE(opt.track_abs_max(w, amax, [&] { ++updates; }));
  for (int step = 1; step <= 4; ++step) {
    w.mutable_grad() = at::randn(w.sizes(), gen) * 3.0;
    b.mutable_grad() = at::randn(b.sizes(), gen);
    opt.step(0.05);
    INFO("step " << step);
    CHECK(updates == step);
    // Bit-equal: a max of the same floats, in any order.
    CHECK(value(amax) == reference_amax(w));
  }
}

TEST_CASE("AdamW amax: NaN elements are ignored and inf counts; a skipped step writes the amax of the unchanged "
          "values", "[optim]") {
  // A 1-D parameter (no weight decay) with zero gradients where it holds NaN and inf: those
  // elements stay NaN and inf through the update (m = v = 0, so the step adds 0).
  at::Tensor p = at::tensor({0.5f, -2.0f, std::nanf(""), 1.25f, -0.75f}).requires_grad_();
  AdamW opt({{"p", p}}, options(MomentsDtype::kFp32));
  const at::Tensor amax = at::zeros({});
  int updates = 0;
  REQUIRE(opt.track_abs_max(p, amax, [&] { ++updates; }));
  p.mutable_grad() = at::tensor({0.1f, -0.2f, 0.0f, 0.3f, 0.0f});
  opt.step(0.01);
  REQUIRE(std::isnan(p[2].item<float>()));
  CHECK(value(amax) == reference_amax(p));
  CHECK(value(amax) > 1.9f);  // the -2 moved by about lr: not the NaN, not 0

  {
    torch::NoGradGuard no_grad;
    p[4].fill_(-INFINITY);
  }
  opt.step(0.01);
  CHECK(value(amax) == INFINITY);

  // found_inf = 1: nothing changes, and the amax is still written, of the values as they are.
  {
    torch::NoGradGuard no_grad;
    p[4].fill_(-3.5f);
  }
  amax.fill_(-1.0f);
  const at::Tensor before = p.detach().clone();
  opt.step(0.01, at::Tensor(), at::ones({}));
  CHECK(at::equal(p.detach().isnan(), before.isnan()));
  CHECK(at::equal(p.detach().nan_to_num(), before.nan_to_num()));
  CHECK(value(amax) == 3.5f);
  CHECK(updates == 3);  // a skipped step wrote the amax too
}

TEST_CASE("AdamW amax: a parameter without a gradient keeps its amax and is not reported updated", "[optim]") {
  at::Tensor w = at::randn({8, 8}).requires_grad_();
  at::Tensor v = at::randn({8}).requires_grad_();
  AdamW opt({{"w", w}, {"v", v}}, options(MomentsDtype::kFp32));
  const at::Tensor amax = at::full({}, 7.0f);
  int updates = 0;
  REQUIRE(opt.track_abs_max(w, amax, [&] { ++updates; }));
  v.mutable_grad() = at::randn({8});
  opt.step(0.01);  // w has no gradient: not updated
  CHECK(updates == 0);
  CHECK(value(amax) == 7.0f);
}

TEST_CASE("AdamW amax: what cannot be tracked says so, and a bad amax tensor is refused", "[optim]") {
  at::Tensor w = at::randn({4, 6}).requires_grad_();
  at::Tensor half = at::randn({4, 6}).to(at::kBFloat16).requires_grad_();  // a separate FP32 master
  AdamW opt({{"w", w}, {"half", half}}, options(MomentsDtype::kFp32));
  CHECK_FALSE(opt.track_abs_max(half, at::zeros({})));
  CHECK_FALSE(opt.track_abs_max(at::randn({4, 6}), at::zeros({})));  // not a parameter of this optimizer
  CHECK_THROWS_AS(opt.track_abs_max(w, at::zeros({}, at::kDouble)), Error);
  CHECK_THROWS_AS(opt.track_abs_max(w, at::zeros({2})), Error);

  // Sharded (ZeRO-1): each rank updates a range only, so no rank knows the whole amax.
  at::Tensor s = at::randn({4, 6}).requires_grad_();
  AdamW sharded({{"s", s}}, options(MomentsDtype::kFp32), optim::ShardRanges{{"s", optim::ParamRange{0, 12}}});
  CHECK_FALSE(sharded.track_abs_max(s, at::zeros({})));
}

TEST_CASE("adamw_multi_tensor_step: amaxes of another count or kind are refused before anything changes",
          "[optim]") {
  const at::Tensor p = at::randn({16});
  const at::Tensor before = p.clone();
  optim::AdamWBatch b{{p}, {at::randn({16})}, {at::zeros({16})}, {at::zeros({16})}, {at::tensor({0.0f, 1.0f, 1.0f})},
                      {at::zeros({}), at::zeros({})}};
  optim::AdamWStepArgs a;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.lr_value = 0.1f;
  CHECK_THROWS_WITH(optim::adamw_multi_tensor_step(b, a), FP8T_CONTAINS("2 amaxes for 1 parameters"));
  b.amaxes = {at::zeros({}, at::kInt)};
  CHECK_THROWS_WITH(optim::adamw_multi_tensor_step(b, a), FP8T_CONTAINS("amax of parameter 0"));
  CHECK(at::equal(p, before));
  b.amaxes = {at::Tensor()};  // undefined: none asked for
  optim::adamw_multi_tensor_step(b, a);
  CHECK_FALSE(at::equal(p, before));
}
