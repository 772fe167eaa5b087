#include "lib/optim/grad_clip.h"

#include <cmath>  // std::sqrt

#include <torch/torch.h>

#include "lib/optim/optimizer.h"  // AdamW (the clip divisor is consumed by its step)
#include "tests/catch.h"

using fp8t::optim::clip_divisor;
using fp8t::optim::clip_grad_norm_;
using fp8t::optim::global_grad_norm;

namespace {

std::vector<at::Tensor> params_with_grads(std::vector<at::Tensor> grads) {
  std::vector<at::Tensor> params;
  for (const at::Tensor& g : grads) {
    at::Tensor p = torch::zeros(g.sizes(), g.options()).set_requires_grad(true);
    p.mutable_grad() = g.clone();
    params.push_back(p);
  }
  return params;
}

// sqrt(sum of squares) in double over all grads.
double direct_norm(const std::vector<at::Tensor>& params) {
  double sum = 0.0;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    sum += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(sum);
}

}  // namespace

// Tolerances: the norm is accumulated in float32 over ~100 elements, relative error a few
// 1e-7; 1e-5 relative is well above that and far below the effect of any wrong formula
// (missing square root, one tensor skipped: >= 1%).

TEST_CASE("clip_grad_norm_ returns the global L2 norm and scales grads to max_norm",
          "[optim]") {
  torch::manual_seed(3);
  auto params = params_with_grads({torch::randn({10, 5}), torch::randn({7}), torch::randn({3, 2, 4})});
  at::Tensor extra = torch::zeros({4}).set_requires_grad(true);  // no grad: skipped
  params.push_back(extra);
  std::vector<at::Tensor> before;
  for (size_t i = 0; i < 3; ++i) before.push_back(params[i].grad().clone());
  const double expected = direct_norm(params);
  REQUIRE(expected > 2.0);

  const at::Tensor norm = clip_grad_norm_(params, /*max_norm=*/1.0);
  REQUIRE(norm.dim() == 0);
  REQUIRE(norm.scalar_type() == at::kFloat);
  REQUIRE(norm.item<double>() == Approx(expected).epsilon(1e-5));
  // Every grad scaled by the same factor max_norm / (norm + 1e-6).
  const double coef = 1.0 / (expected + 1e-6);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(torch::allclose(params[i].grad(), before[i] * coef, /*rtol=*/1e-5, /*atol=*/1e-7));
  }
  REQUIRE(direct_norm(params) == Approx(1.0).epsilon(1e-5));
  REQUIRE_FALSE(extra.grad().defined());
}

TEST_CASE("clip_grad_norm_ leaves grads below max_norm unchanged", "[optim]") {
  auto params = params_with_grads({torch::full({3}, 0.5), torch::full({2, 2}, -0.25)});
  const at::Tensor g0 = params[0].grad().clone();
  const at::Tensor g1 = params[1].grad().clone();
  const at::Tensor norm = clip_grad_norm_(params, 10.0);
  // sqrt(3 * 0.25 + 4 * 0.0625) = 1 exactly in float32.
  REQUIRE(norm.item<float>() == 1.0f);
  // The clamped factor is exactly 1, so grads are bit-identical.
  REQUIRE(torch::equal(params[0].grad(), g0));
  REQUIRE(torch::equal(params[1].grad(), g1));
}

TEST_CASE("clip_grad_norm_ with max_norm <= 0 only measures", "[optim]") {
  auto params = params_with_grads({torch::full({4}, 3.0), torch::full({4}, 4.0)});
  const at::Tensor norm = clip_grad_norm_(params, 0.0);
  REQUIRE(norm.item<float>() == Approx(10.0).epsilon(1e-6));  // sqrt(4*9 + 4*16)
  REQUIRE(torch::equal(params[0].grad(), torch::full({4}, 3.0)));
  REQUIRE(torch::equal(params[1].grad(), torch::full({4}, 4.0)));
}

TEST_CASE("clip_grad_norm_ handles bfloat16 grads and no grads at all", "[optim]") {
  auto params = params_with_grads({torch::full({16}, 2.0, torch::kBFloat16)});
  const at::Tensor norm = clip_grad_norm_(params, 4.0);
  REQUIRE(norm.scalar_type() == at::kFloat);
  REQUIRE(norm.item<float>() == Approx(8.0).epsilon(1e-6));
  REQUIRE(params[0].grad().scalar_type() == at::kBFloat16);
  // 2 * 4 / 8 = 1 (bfloat16 rounding of 1 - 1.25e-7 gives exactly 1).
  REQUIRE(params[0].grad().to(at::kFloat).max().item<float>() == Approx(1.0).epsilon(1e-2));

  std::vector<at::Tensor> none = {torch::zeros({3}).set_requires_grad(true)};
  const at::Tensor zero = clip_grad_norm_(none, 1.0);
  REQUIRE(zero.dim() == 0);
  REQUIRE(zero.item<float>() == 0.0f);
}

TEST_CASE("global_grad_norm measures without touching the grads; clip_divisor clamps at 1", "[optim]") {
  torch::manual_seed(5);
  auto params = params_with_grads({torch::randn({10, 5}) * 3.0, torch::randn({7})});
  const at::Tensor g0 = params[0].grad().clone();
  const double expected = direct_norm(params);
  const at::Tensor norm = global_grad_norm(params);
  REQUIRE(norm.item<double>() == Approx(expected).epsilon(1e-5));
  REQUIRE(torch::equal(params[0].grad(), g0));

  const at::Tensor d = clip_divisor(norm, 2.0);
  REQUIRE(d.scalar_type() == at::kFloat);
  REQUIRE(d.item<double>() == Approx((expected + 1e-6) / 2.0).epsilon(1e-5));
  REQUIRE(clip_divisor(norm, 10.0 * expected).item<float>() == 1.0f);  // below max_norm: no clipping
  REQUIRE_THROWS(clip_divisor(norm, 0.0));
}

TEST_CASE("AdamW with the clip divisor equals clipping the grads first", "[optim]") {
  // The fused update divides each grad by the divisor; clip_grad_norm_ multiplies by its
  // reciprocal. The two differ by at most an ulp of the grad, carried through the update at the
  // same relative size: rtol 1e-5 on the updated weights. eps = 1 makes the update depend on the
  // grad's magnitude (Adam's first step is otherwise about sign(g), whatever the clipping).
  const fp8t::optim::AdamWOptions options{0.9, 0.95, /*eps=*/1.0, 0.1};
  auto named = [](const std::vector<at::Tensor>& ps) {
    return fp8t::optim::NamedParameters{{"w", ps[0]}, {"b", ps[1]}};
  };
  for (const double max_norm : {0.5, 1e6}) {
    torch::manual_seed(11);
    const std::vector<at::Tensor> grads = {torch::randn({16, 8}) * 4.0, torch::randn({8})};
    const std::vector<at::Tensor> start = {torch::randn({16, 8}), torch::randn({8})};
    std::vector<std::vector<at::Tensor>> sets;
    for (int k = 0; k < 3; ++k) {
      sets.push_back(params_with_grads(grads));
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < grads.size(); ++i) sets[k][i].copy_(start[i]);
    }
    auto& folded = sets[0];
    auto& clipped = sets[1];
    auto& unclipped = sets[2];
    fp8t::optim::AdamW opt_folded(named(folded), options), opt_clipped(named(clipped), options),
        opt_unclipped(named(unclipped), options);
    const at::Tensor norm = global_grad_norm(folded);
    REQUIRE(norm.item<double>() > 10.0);
    opt_folded.step(1e-2, clip_divisor(norm, max_norm));
    clip_grad_norm_(clipped, max_norm);
    opt_clipped.step(1e-2);
    opt_unclipped.step(1e-2);
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO("max_norm " << max_norm << ", tensor " << i);
      REQUIRE(torch::allclose(folded[i], clipped[i], /*rtol=*/1e-5, /*atol=*/1e-7));
      // The divisor acts exactly when the norm exceeds max_norm.
      const double diff = (folded[i] - unclipped[i]).abs().max().item<double>();
      if (max_norm < 1.0) {
        REQUIRE(diff > 1e-4);
      } else {
        REQUIRE(diff == 0.0);
      }
    }
  }
}

#if defined(FP8T_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>  // c10::cuda::warning_state (sync debug mode)

TEST_CASE("clip_grad_norm_ on CUDA matches the CPU result without a host sync",
          "[optim][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  torch::manual_seed(3);
  std::vector<at::Tensor> cpu_grads = {torch::randn({64, 32}), torch::randn({32}),
                                       torch::randn({8, 8, 8})};
  std::vector<at::Tensor> gpu_grads;
  for (const at::Tensor& g : cpu_grads) gpu_grads.push_back(g.cuda());
  auto cpu = params_with_grads(cpu_grads);
  auto gpu = params_with_grads(gpu_grads);

  // Any synchronizing call (e.g. reading the norm on the host) throws in this mode.
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  at::Tensor norm;
  REQUIRE_NOTHROW(norm = clip_grad_norm_(gpu, 1.0));
  REQUIRE_THROWS(norm.item<float>());  // the mode is in force: a host read would be caught
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);

  const at::Tensor cpu_norm = clip_grad_norm_(cpu, 1.0);
  REQUIRE(norm.is_cuda());
  // Different reduction orders in float32 over ~2.6k elements: relative 1e-5.
  REQUIRE(norm.item<double>() == Approx(cpu_norm.item<double>()).epsilon(1e-5));
  for (size_t i = 0; i < cpu.size(); ++i) {
    REQUIRE(torch::allclose(gpu[i].grad().cpu(), cpu[i].grad(), 1e-5, 1e-7));
  }
}
#endif
