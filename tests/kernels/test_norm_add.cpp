// The residual add fused into the norm (kernels/norm_*.cu fp8t_add_norm_*, through
// CudaBackend::add_norm_forward / add_norm_backward and ops::add_norm): bit-exact against the GPU's
// unfused path (an ATen add, then fp8t_norm_forward / fp8t_norm_backward and an ATen add of the
// residual gradient), since the fused kernels run the same FP32 add and the same reductions; and
// ops::add_norm against ATen's own norms within a stated tolerance (other reductions).
#if defined(FP8T_WITH_CUDA)

#include <torch/torch.h>  // torch::autograd::grad

#include <cmath>   // std::ldexp
#include <vector>  // std::vector

#include "fp8t_kernels.h"                    // fp8t_add_norm_forward / _backward (the timing case)
#include "lib/fp8/backends/cuda_backend.h"   // cuda_backend
#include "lib/ops/rms_norm.h"                // ops::rms_norm
#include "lib/ops/add_norm.h"                // ops::add_norm
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/cuda_timing.h"       // median_event_ms
#include "tests/kernels/norm_test_shapes.h"  // norm_test_shapes, kNormEps

namespace {

using fp8t::fp8::Format;
using namespace fp8t::test;

constexpr double kEps = kNormEps;
const std::vector<std::pair<int64_t, int64_t>>& kShapes = norm_test_shapes();  // norm_test_shapes.h

fp8t::fp8::SlotRef make_slot(Format f) {
  fp8t::fp8::SlotRef slot;
  slot.scale = at::full({}, 16.0f, on_cuda(at::kFloat));
  slot.amax = at::full({}, 0.25f, on_cuda(at::kFloat));
  slot.format = f;
  return slot;
}

bool equal_or_both_undefined(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || at::equal(a, b));
}

struct Inputs {
  at::Tensor x, h, g, b, dy, dr;
};

Inputs make_inputs(int64_t rows, int64_t cols, at::ScalarType h_dtype, uint64_t seed) {
  at::manual_seed(seed);
  Inputs in;
  in.x = (at::randn({rows, cols}) * 2.0 + 0.5).cuda();
  in.h = at::randn({rows, cols}).to(h_dtype).cuda();
  in.g = (1.0 + 0.1 * at::randn({cols})).cuda();
  in.b = (0.1 * at::randn({cols})).cuda();
  in.dy = at::randn({rows, cols}).to(at::kBFloat16).cuda();  // a BF16 consumer's gradient
  in.dr = at::randn({rows, cols}).cuda();
  return in;
}

}  // namespace

TEST_CASE("add_norm: forward and backward bit-exact to the GPU's unfused add and norm", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  for (bool rms : {false, true}) {
    for (at::ScalarType h_dtype : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, cols] : kShapes) {
        CAPTURE(rms ? "RMSNorm" : "LayerNorm", dtype_name(h_dtype), rows, cols);
        const Inputs in = make_inputs(rows, cols, h_dtype, rows * 5 + cols);
        const at::Tensor r = in.x + in.h;  // ATen: float(x) + float(h) in FP32
        // Fused FP8 output with y (delayed scaling), FP8 only (y not written), no FP8 but the
        // amax of y (current scaling's hand-over).
        for (int variant : {0, 1, 2}) {
          CAPTURE(variant);
          const Format f = variant == 1 ? Format::kE5M2 : Format::kE4M3;
          const fp8t::fp8::SlotRef s_ref = make_slot(f), s_fused = make_slot(f);
          const at::Tensor a_ref = at::zeros({}, on_cuda(at::kFloat)), a_fused = at::zeros({}, on_cuda(at::kFloat));
          const bool with_slot = variant != 2, write_y = variant != 1;
          const auto ref = gpu.norm_forward(r, in.g, in.b, kEps, rms, with_slot ? &s_ref : nullptr, write_y,
                                            with_slot ? at::Tensor() : a_ref);
          const auto got = gpu.add_norm_forward(in.x, in.h, in.g, in.b, kEps, rms, with_slot ? &s_fused : nullptr,
                                                write_y, with_slot ? at::Tensor() : a_fused);
          REQUIRE(at::equal(got.sum, r));
          REQUIRE(equal_or_both_undefined(got.y, ref.y));
          REQUIRE(at::equal(got.rstd, ref.rstd));
          REQUIRE(equal_or_both_undefined(got.mean, ref.mean));
          if (with_slot) {
            REQUIRE(first_mismatch(got.y_fp8.rowwise.codes, ref.y_fp8.rowwise.codes) == -1);
            REQUIRE(first_mismatch(got.y_fp8.columnwise.codes, ref.y_fp8.columnwise.codes) == -1);
            REQUIRE(same_bits(s_fused.amax.item<float>(), s_ref.amax.item<float>()));
            REQUIRE(got.y_fp8.rowwise.scale_inv.item<float>() == 1.0f / 16.0f);
          } else {
            REQUIRE(same_bits(a_fused.item<float>(), a_ref.item<float>()));
          }
        }
        // Backward: the norm's gradient rounded to FP32, plus the residual's other gradient term.
        const auto f = gpu.add_norm_forward(in.x, in.h, in.g, in.b, kEps, rms, nullptr);
        const auto nb = gpu.norm_backward(in.dy, r, in.g, in.b, f.mean, f.rstd, rms);
        for (bool with_dr : {true, false}) {
          CAPTURE(with_dr);
          const at::Tensor dr = with_dr ? in.dr : at::Tensor();
          const auto got = gpu.add_norm_backward(in.dy, dr, f.sum, in.g, in.b, f.mean, f.rstd, rms, h_dtype);
          const at::Tensor total = with_dr ? nb.grad_x + in.dr : nb.grad_x;
          REQUIRE(got.grad_x.scalar_type() == at::kFloat);
          REQUIRE(at::equal(got.grad_x, total));
          REQUIRE(got.grad_h.scalar_type() == h_dtype);
          REQUIRE(at::equal(got.grad_h, total.to(h_dtype)));  // one rounding, as autograd converts
          REQUIRE(at::equal(got.grad_gamma, nb.grad_gamma));
          REQUIRE(equal_or_both_undefined(got.grad_beta, nb.grad_beta));
        }
      }
    }
  }
}

TEST_CASE("ops::add_norm: the plain model's fused norm, BF16 output bit-exact to the FP32 kernel's y rounded",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  fp8t::fp8::Backend& gpu = fp8t::fp8::cuda_backend();
  for (bool rms : {false, true}) {
    for (at::ScalarType y_dtype : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, cols] : kShapes) {
        CAPTURE(rms ? "RMSNorm" : "LayerNorm", dtype_name(y_dtype), rows, cols);
        Inputs in = make_inputs(rows, cols, at::kBFloat16, rows * 11 + cols);
        in.x.requires_grad_();
        in.h.requires_grad_();
        in.g.requires_grad_();
        in.b.requires_grad_();
        REQUIRE(fp8t::ops::add_norm_fused(in.x, in.h, y_dtype));
        const auto o = fp8t::ops::add_norm(in.x, in.h, in.g, rms ? at::Tensor() : in.b, kEps, rms, y_dtype);
        REQUIRE(o.y.scalar_type() == y_dtype);
        const at::Tensor r = (in.x + in.h).detach();
        const auto ref = gpu.norm_forward(r, in.g.detach(), in.b.detach(), kEps, rms, nullptr);
        REQUIRE(at::equal(o.sum.detach(), r));
        REQUIRE(at::equal(o.y.detach(), ref.y.to(y_dtype)));

        const at::Tensor dy = in.dy.to(y_dtype);
        const auto grads = torch::autograd::grad({o.sum, o.y}, {in.x, in.h, in.g}, {in.dr, dy});
        const auto want = gpu.add_norm_backward(dy, in.dr, r, in.g.detach(), in.b.detach(), ref.mean, ref.rstd, rms,
                                                at::kBFloat16);
        REQUIRE(at::equal(grads[0], want.grad_x));
        REQUIRE(at::equal(grads[1], want.grad_h));
        REQUIRE(at::equal(grads[2], want.grad_gamma));

        // Against ATen's norms of r in FP32 (Welford for LayerNorm, rsqrt for RMSNorm): other
        // reduction orders, a few FP32 ulps (1e-5 relative), plus the rounding of y to bf16 (2^-8).
        const at::Tensor aten = rms ? fp8t::ops::rms_norm(r, in.g.detach(), kEps).y
                                    : at::layer_norm(r, {cols}, in.g.detach(), in.b.detach(), kEps);
        const double tol = y_dtype == at::kFloat ? 1e-5 : std::ldexp(1.0, -8);
        CHECK(rel_frobenius(o.y.detach(), aten) <= tol);
      }
    }
  }
}

TEST_CASE("ops::add_norm: refuses what it cannot fuse, and says so", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const at::Tensor x = at::zeros({4, 8}, on_cuda(at::kFloat));
  CHECK_FALSE(fp8t::ops::add_norm_fused(x.to(at::kBFloat16), x, at::kBFloat16));  // x must be FP32
  CHECK_FALSE(fp8t::ops::add_norm_fused(x, x.to(at::kHalf), at::kFloat));
  CHECK_FALSE(fp8t::ops::add_norm_fused(x, x, at::kHalf));
  CHECK_FALSE(fp8t::ops::add_norm_fused(x, x.view({8, 4}), at::kFloat));
  CHECK_FALSE(fp8t::ops::add_norm_fused(x.cpu(), x.cpu(), at::kFloat));
  CHECK(fp8t::ops::add_norm_fused(x, x, at::kFloat));
  CHECK_THROWS_WITH(fp8t::ops::add_norm(x, x.to(at::kHalf), at::ones({8}).cuda(), at::Tensor(), kEps, false,
                                        at::kFloat),
                    FP8T_CONTAINS("add_norm: needs a float32 CUDA x"));
}

// The 1.3B's fused norms, timed: tensors at a 16-byte-aligned address take the vectorized
// kernels, the same tensors one element further on (4-byte aligned) the scalar ones, in the same
// run. Forward: FP32 x + BF16 h -> FP32 r and E4M3 codes (the fp8 model's ln_2; 11 bytes per
// element); backward: BF16 dy, FP32 r and dr -> FP32 dx and BF16 dh (16 bytes per element).
TEST_CASE("norm timing: fused add + norm at [16384, 2048], vectorized against the scalar kernels "
          "(runs with FP8T_TEST_REPORT)", "[kernels][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  if (!reporting()) SKIP("a timing case: it runs with FP8T_TEST_REPORT=1");
  if (skip_large(int64_t{1} << 30)) SKIP("too large under compute-sanitizer (FP8T_TEST_SMALL)");
  constexpr int64_t rows = 16384, cols = 2048, n = rows * cols;
  const at::TensorOptions f32 = on_cuda(at::kFloat), b16 = on_cuda(at::kBFloat16), u8 = on_cuda(at::kByte);
  // One spare element per buffer; `addr(t, off)` is the address of element `off`.
  const at::Tensor x = at::randn({n + 1}, f32) * 2.0, h = at::randn({n + 1}, b16), r = at::empty({n + 1}, f32);
  const at::Tensor codes = at::empty({n + 1}, u8), dy = at::randn({n + 1}, b16), dr = at::randn({n + 1}, f32);
  const at::Tensor dx = at::empty({n + 1}, f32), dh = at::empty({n + 1}, b16);
  const at::Tensor gamma = 1.0 + 0.1 * at::randn({cols}, f32), beta = 0.1 * at::randn({cols}, f32);
  const at::Tensor mean = at::empty({rows}, f32), rstd = at::empty({rows}, f32);
  const at::Tensor dgamma = at::empty({cols}, f32), dbeta = at::empty({cols}, f32);
  const at::Tensor scale = at::full({}, 4.0f, f32), amax = at::zeros({}, f32), scale_inv = at::empty({}, f32);
  const at::Tensor ws = at::empty({static_cast<int64_t>(fp8t_norm_backward_workspace_bytes(rows, cols))}, u8);
  auto addr = [](const at::Tensor& t, int64_t off) { return static_cast<char*>(t.data_ptr()) + off * t.element_size(); };
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  auto forward = [&](int64_t off) {
    REQUIRE(fp8t_add_norm_forward(reinterpret_cast<float*>(addr(x, off)), addr(h, off), FP8T_DTYPE_BF16, rows, cols,
                                  reinterpret_cast<float*>(addr(r, off)), gamma.data_ptr<float>(), beta.data_ptr<float>(),
                                  1e-5f, 0, nullptr, FP8T_DTYPE_BF16, mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                  scale.data_ptr<float>(), FP8T_FORMAT_E4M3, reinterpret_cast<uint8_t*>(addr(codes, off)),
                                  amax.data_ptr<float>(), scale_inv.data_ptr<float>(), stream) == cudaSuccess);
  };
  auto backward = [&](int64_t off) {
    REQUIRE(fp8t_add_norm_backward(addr(dy, off), FP8T_DTYPE_BF16, reinterpret_cast<float*>(addr(r, off)),
                                   reinterpret_cast<float*>(addr(dr, off)), rows, cols, gamma.data_ptr<float>(),
                                   mean.data_ptr<float>(), rstd.data_ptr<float>(), 0,
                                   reinterpret_cast<float*>(addr(dx, off)), addr(dh, off), FP8T_DTYPE_BF16,
                                   dgamma.data_ptr<float>(), dbeta.data_ptr<float>(), ws.data_ptr(), stream) == cudaSuccess);
  };
  double fwd_ms[2], bwd_ms[2];
  at::Tensor dx_of[2];
  for (int64_t off : {0, 1}) {  // 0: vectorized, 1: scalar
    // The scalar run reads the vectorized run's inputs shifted by one element: same values.
    if (off == 1) {
      x.narrow(0, 1, n).copy_(x.narrow(0, 0, n).clone());
      h.narrow(0, 1, n).copy_(h.narrow(0, 0, n).clone());
      dy.narrow(0, 1, n).copy_(dy.narrow(0, 0, n).clone());
      dr.narrow(0, 1, n).copy_(dr.narrow(0, 0, n).clone());
    }
    fwd_ms[off] = median_event_ms(3, 20, [&] { forward(off); });
    bwd_ms[off] = median_event_ms(3, 20, [&] { backward(off); });
    dx_of[off] = dx.narrow(0, off, n).clone();
  }
  auto tbs = [](double bytes_per_element, double ms) { return bytes_per_element * n / (ms * 1e-3) / 1e12; };
  std::printf("norm add forward [16384, 2048] -> E4M3: vectorized %.4f ms %.2f TB/s, scalar %.4f ms %.2f TB/s; "
              "backward: vectorized %.4f ms %.2f TB/s, scalar %.4f ms %.2f TB/s (with the dgamma/dbeta sums)\n",
              fwd_ms[0], tbs(11, fwd_ms[0]), fwd_ms[1], tbs(11, fwd_ms[1]), bwd_ms[0], tbs(16, bwd_ms[0]), bwd_ms[1],
              tbs(16, bwd_ms[1]));
  // Both ran on the same values: dx agrees up to the order of each row's FP32 sums (1e-5 relative).
  CHECK((dx_of[0] - dx_of[1]).norm().item<double>() <= 1e-5 * dx_of[1].norm().item<double>());
  CHECK(fwd_ms[0] < fwd_ms[1]);
  CHECK(bwd_ms[0] < bwd_ms[1]);
}

#endif  // FP8T_WITH_CUDA
