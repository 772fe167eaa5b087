// kernels/norm_*.cu (through CudaBackend::norm_forward / norm_backward): LayerNorm and RMSNorm
// against float64 references, the fused FP8 output bit-exact, amax exact.
#if defined(FP8T_WITH_CUDA)

#include <cmath>   // std::ldexp
#include <vector>  // std::vector

#include "lib/fp8/backends/cuda_backend.h"   // cuda_backend
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/norm_test_shapes.h"  // norm_test_shapes, kNormEps

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

constexpr double kEps = kNormEps;
const std::vector<std::pair<int64_t, int64_t>>& kShapes = norm_test_shapes();  // norm_test_shapes.h

struct Ref {
  at::Tensor y, mean, rstd, dx, dgamma, dbeta;
};

// Float64 forward and backward (autograd) from the exact values of the inputs.
Ref reference(const at::Tensor& x, const at::Tensor& g, const at::Tensor& b, const at::Tensor& dy, bool rms) {
  at::Tensor xd = x.to(at::kDouble).cpu().requires_grad_();
  at::Tensor gd = g.to(at::kDouble).cpu().requires_grad_();
  at::Tensor bd = b.to(at::kDouble).cpu().requires_grad_();
  Ref r;
  at::Tensor y;
  if (rms) {
    r.rstd = at::rsqrt(xd.pow(2).mean(1, true) + kEps);
    y = xd * r.rstd * gd;
  } else {
    r.mean = xd.mean(1, true);
    r.rstd = at::rsqrt((xd - r.mean).pow(2).mean(1, true) + kEps);
    y = (xd - r.mean) * r.rstd * gd + bd;
  }
  y.backward(dy.to(at::kDouble).cpu());
  r.y = y.detach();
  r.dx = xd.grad();
  r.dgamma = gd.grad();
  if (!rms) r.dbeta = bd.grad();
  r.rstd = r.rstd.detach().view({-1});
  if (!rms) r.mean = r.mean.detach().view({-1});
  return r;
}

// max over elements of |got - want| / (abs_tol + rel_tol * |want|): <= 1 passes.
double worst(const at::Tensor& got, const at::Tensor& want, double rel_tol, double abs_tol) {
  const at::Tensor g = got.to(at::kDouble).cpu(), w = want.to(at::kDouble).cpu();
  return ((g - w).abs() / (w.abs() * rel_tol + abs_tol)).max().item<double>();
}

}  // namespace

TEST_CASE("norm forward/backward vs float64, fused FP8 output bit-exact", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  for (bool rms : {false, true}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, cols] : kShapes) {
        CAPTURE(rms ? "RMSNorm" : "LayerNorm", dtype_name(dt), rows, cols);
        at::manual_seed(rows * 7 + cols);
        const at::Tensor x = (at::randn({rows, cols}) * 3.0 + 1.5).to(dt);
        const at::Tensor g = 1.0 + 0.1 * at::randn({cols});
        const at::Tensor b = 0.1 * at::randn({cols});
        const at::Tensor dy = at::randn({rows, cols}).to(dt);
        const Ref ref = reference(x, g, b, dy, rms);

        fp8t::fp8::SlotRef slot;
        slot.scale = at::full({}, 16.0f, on_cuda(at::kFloat));
        slot.amax = at::full({}, 0.5f, on_cuda(at::kFloat));
        slot.format = Format::kE4M3;
        const auto f = gpu.norm_forward(x.cuda(), g.cuda(), b.cuda(), kEps, rms, &slot);
        REQUIRE(f.y.scalar_type() == dt);
        REQUIRE(f.rstd.sizes() == at::IntArrayRef{rows});
        REQUIRE(f.mean.defined() == !rms);

        // Tolerances. fp32: a few ulps of FP32 arithmetic on O(1) values (1e-5 relative, 1e-5
        // absolute for outputs near 0). bf16: the output is rounded to bf16 (2^-9 relative) on top.
        const double y_rel = dt == at::kFloat ? 1e-5 : std::ldexp(1.0, -8);
        INFO("worst y error / tolerance");
        REQUIRE(worst(f.y, ref.y, y_rel, 1e-5) <= 1.0);
        REQUIRE(worst(f.rstd, ref.rstd, 1e-5, 0.0) <= 1.0);
        if (!rms) REQUIRE(worst(f.mean, ref.mean, 1e-5, 1e-5) <= 1.0);

        // The FP8 copy is exactly a cast of the stored y, in both layouts.
        require_same_codes(f.y_fp8.rowwise.codes, host_encode(f.y, 16.0f, Format::kE4M3), f.y, 16.0f);
        const at::Tensor yt = f.y.t().contiguous();
        require_same_codes(f.y_fp8.columnwise.codes, host_encode(yt, 16.0f, Format::kE4M3), yt, 16.0f);
        REQUIRE(same_bits(slot.amax.item<float>(), host_amax(f.y, 0.5f)));
        REQUIRE(f.y_fp8.rowwise.scale_inv.item<float>() == 1.0f / 16.0f);

        const auto bw = gpu.norm_backward(dy.cuda(), x.cuda(), g.cuda(), b.cuda(), f.mean, f.rstd, rms);
        REQUIRE(bw.grad_x.scalar_type() == dt);
        REQUIRE(bw.grad_gamma.scalar_type() == at::kFloat);
        REQUIRE(bw.grad_beta.defined() == !rms);
        // dx: FP32 arithmetic over a row (1e-5 relative, Frobenius), plus bf16 output rounding
        // (2^-8) for bf16. dgamma/dbeta: FP32 accumulation over the rows of exact inputs (1e-5).
        const double dx_err = rel_frobenius(bw.grad_x, ref.dx);
        const double dg_err = rel_frobenius(bw.grad_gamma, ref.dgamma);
        CAPTURE(dx_err, dg_err);
        REQUIRE(dx_err <= (dt == at::kFloat ? 1e-5 : std::ldexp(1.0, -8)));
        REQUIRE(dg_err <= 1e-5);
        if (!rms) REQUIRE(rel_frobenius(bw.grad_beta, ref.dbeta) <= 1e-5);
        if (reporting() && rows == 217) {
          std::printf("norm %s %s %ldx%ld: dx rel err %.2e, dgamma rel err %.2e\n", rms ? "rms" : "ln",
                      dtype_name(dt).c_str(), static_cast<long>(rows), static_cast<long>(cols), dx_err, dg_err);
        }
      }
    }
  }
}

TEST_CASE("norm forward without FP8 output and without beta", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  at::manual_seed(5);
  const at::Tensor x = at::randn({37, 384}).cuda();
  const at::Tensor g = (1.0 + 0.1 * at::randn({384})).cuda();
  const auto f = gpu.norm_forward(x, g, at::Tensor(), kEps, false, nullptr);
  REQUIRE(!f.y_fp8.rowwise.defined());
  const at::Tensor ref = at::layer_norm(x.cpu().to(at::kDouble), {384}, g.cpu().to(at::kDouble), {}, kEps);
  REQUIRE(worst(f.y, ref, 1e-5, 1e-5) <= 1.0);
  const auto bw = gpu.norm_backward(at::ones_like(x), x, g, at::Tensor(), f.mean, f.rstd, false);
  REQUIRE(!bw.grad_beta.defined());
  REQUIRE(bw.grad_x.sizes() == x.sizes());
}

TEST_CASE("norm: FP8-only forward and a bf16 gradient over fp32 x, bit-exact to the plain kernels",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  for (bool rms : {false, true}) {
    for (const auto& [rows, cols] : kShapes) {
      CAPTURE(rms ? "RMSNorm" : "LayerNorm", rows, cols);
      at::manual_seed(rows * 3 + cols);
      const at::Tensor x = (at::randn({rows, cols}) * 2.0 + 0.5).cuda();
      const at::Tensor g = (1.0 + 0.1 * at::randn({cols})).cuda();
      const at::Tensor b = (0.1 * at::randn({cols})).cuda();
      auto make_slot = [] {
        fp8t::fp8::SlotRef slot;
        slot.scale = at::full({}, 16.0f, on_cuda(at::kFloat));
        slot.amax = at::zeros({}, on_cuda(at::kFloat));
        slot.format = Format::kE4M3;
        return slot;
      };
      const fp8t::fp8::SlotRef with_y = make_slot(), without_y = make_slot();
      const auto full = gpu.norm_forward(x, g, b, kEps, rms, &with_y);
      const auto lean = gpu.norm_forward(x, g, b, kEps, rms, &without_y, /*write_y=*/false);
      REQUIRE_FALSE(lean.y.defined());
      // The FP8 copy does not depend on whether y is stored.
      REQUIRE(first_mismatch(lean.y_fp8.rowwise.codes, full.y_fp8.rowwise.codes) == -1);
      REQUIRE(first_mismatch(lean.y_fp8.columnwise.codes, full.y_fp8.columnwise.codes) == -1);
      REQUIRE(same_bits(without_y.amax.item<float>(), with_y.amax.item<float>()));

      // dy in bf16 is read exactly as its fp32 value: the mixed kernel equals the fp32 one.
      const at::Tensor dy = at::randn({rows, cols}, on_cuda(at::kFloat)).to(at::kBFloat16);
      const auto mixed = gpu.norm_backward(dy, x, g, b, full.mean, full.rstd, rms);
      const auto plain = gpu.norm_backward(dy.to(at::kFloat), x, g, b, full.mean, full.rstd, rms);
      REQUIRE(mixed.grad_x.scalar_type() == at::kFloat);
      REQUIRE(at::equal(mixed.grad_x, plain.grad_x));
      REQUIRE(at::equal(mixed.grad_gamma, plain.grad_gamma));
      if (!rms) REQUIRE(at::equal(mixed.grad_beta, plain.grad_beta));
    }
  }
}

#endif  // FP8T_WITH_CUDA
