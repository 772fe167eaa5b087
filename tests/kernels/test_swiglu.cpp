// kernels/swiglu.cu through ops::swiglu (lib/ops/swiglu_cuda.cpp) and model::Activation: the
// plain model's SwiGLU on the GPU gives, bit for bit, what the CPU computes (at::silu(gate) * up
// and its autograd, through lib/numerics/swiglu_math.h where ATen's CPU kernel leaves its vector
// loop), and keeps only h.
#if defined(FP8T_WITH_CUDA)

#include <c10/cuda/CUDACachingAllocator.h>  // getDeviceStats

#include <cstdio>   // std::printf
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/model/layers.h"              // model::Activation
#include "lib/ops/swiglu.h"                // ops::swiglu
#include "tests/fp8/swiglu_test_util.h"    // unfused_swiglu*, math_swiglu*, bit_diff
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, on_cuda, reporting, skip_large
#include "tests/kernels/cuda_timing.h"     // median_event_ms

namespace {

using namespace fp8t;
using namespace fp8t::test;

// [rows, F]: scalar paths (F not a multiple of 8), vector paths, rows = 0, a few thousand rows.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 16}, {13, 7}, {64, 64}, {217, 256}, {0, 16}, {2056, 520}};

// The CPU result: swiglu_math.h on the host, equal to the unfused CPU composition where ATen's
// silu runs its vector loop throughout (checked here), the kernel's reference everywhere.
at::Tensor cpu_reference(const at::Tensor& math, const at::Tensor& unfused, int64_t rows, int64_t f) {
  if (aten_cpu_uses_vector_exp() && f % 64 == 0 && rows * f <= 16384) {
    const BitDiff d = bit_diff(math, unfused);
    INFO("CPU composition vs swiglu_math.h: " << d.count << " elements differ, first at " << d.first);
    REQUIRE(d.count == 0);
  }
  return math;
}

}  // namespace

TEST_CASE("swiglu: the GPU SwiGLU equals the CPU's bits, forward and backward", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (const at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
    for (const auto& [rows, f] : kShapes) {
      INFO(dtype_name(dt) << " rows " << rows << " F " << f);
      at::manual_seed(rows * 31 + f);
      const at::Tensor h = (at::randn({rows, 2 * f}) * 3.0).to(dt);
      const at::Tensor dy = (at::randn({rows, f}) * at::pow(2.0, at::randint(-8, 8, {rows, f}))).to(dt);
      const at::Tensor want_y = cpu_reference(math_swiglu(h), unfused_swiglu(h), rows, f);
      const at::Tensor want_dh = cpu_reference(math_swiglu_backward(dy, h), unfused_swiglu_backward(dy, h), rows, f);

      const at::Tensor hg = h.cuda().requires_grad_();
      REQUIRE(ops::swiglu_fused(hg));
      const at::Tensor y = model::Activation(model::Activation::Kind::kSwiGLU).forward(hg);  // the model's path
      y.backward(dy.cuda());
      REQUIRE(y.scalar_type() == dt);
      const BitDiff dy_bits = bit_diff(y.detach().cpu(), want_y), dh_bits = bit_diff(hg.grad().cpu(), want_dh);
      INFO("y: " << dy_bits.count << " differ (first " << dy_bits.first << "); dh: " << dh_bits.count
                 << " differ (first " << dh_bits.first << ")");
      CHECK(dy_bits.count == 0);
      CHECK(dh_bits.count == 0);
    }
  }
}

TEST_CASE("swiglu: every bf16 gate (the silu table and its closed forms) gives the CPU's bits, forward and "
          "backward",
          "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const int64_t f = 256;
  const at::Tensor h = every_bf16_gate_h(f);
  const at::Tensor dy = every_bf16_gate_dy(f);
  const at::Tensor hg = h.cuda().requires_grad_();
  const at::Tensor y = ops::swiglu(hg);
  y.backward(dy.cuda());
  const BitDiff dy_bits = bit_diff(y.detach().cpu(), math_swiglu(h));
  const BitDiff dh_bits = bit_diff(hg.grad().cpu(), math_swiglu_backward(dy, h));
  INFO("y: " << dy_bits.count << " differ (first " << dy_bits.first << "); dh: " << dh_bits.count << " differ (first "
             << dh_bits.first << ")");
  CHECK(dy_bits.count == 0);
  CHECK(dh_bits.count == 0);
}

TEST_CASE("swiglu: between forward and backward only h is kept, not silu(gate)", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const int64_t rows = 256, f = 512, h_bytes = rows * 2 * f * 2, y_bytes = rows * f * 2;
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  auto allocated = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; };
  const int64_t before = allocated();
  at::Tensor y;
  {
    const at::Tensor leaf = at::randn({rows, 2 * f}, on_cuda(at::kBFloat16)).requires_grad_();
    y = ops::swiglu(leaf * 1.0);  // h: a non-leaf, as c_fc's output is
  }
  // The leaf (held by the graph), h (saved) and y; the unfused composition also keeps silu(gate).
  CHECK(allocated() - before == 2 * h_bytes + y_bytes);
  y.backward(at::ones_like(y));
}

// The LLaMA-1B MLP's SwiGLU at B8 T2048 (h [16384, 16384] bf16), fused against the composition,
// forward + backward (runs with FP8T_TEST_REPORT).
TEST_CASE("swiglu timing: the LLaMA-1B SwiGLU, fused against the composition", "[kernels][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  if (!reporting() || skip_large(int64_t{1} << 30)) {
    SKIP("a timing case: it runs with FP8T_TEST_REPORT=1 (and not FP8T_TEST_SMALL)");
  }
  const int64_t rows = 16384, f = 8192;
  const at::Tensor h = at::randn({rows, 2 * f}, on_cuda(at::kBFloat16)).requires_grad_();
  const at::Tensor dy = at::randn({rows, f}, on_cuda(at::kBFloat16));
  auto step = [&](bool fused) {
    const at::Tensor y = fused ? ops::swiglu(h) : unfused_swiglu(h);
    y.backward(dy);
    h.mutable_grad().reset();
  };
  const double fused_ms = median_event_ms(3, 20, [&] { step(true); });
  const double composed_ms = median_event_ms(3, 20, [&] { step(false); });
  // Fused: h read and y written; dy and h read, dh written: 2 * (2F + F + F + 2F + 2F) bytes per row.
  const double bytes = 2.0 * rows * 8 * f;
  std::printf("swiglu [16384, 2 x 8192] bf16 forward + backward: fused %.4f ms (%.2f TB/s), composition %.4f ms\n",
              fused_ms, bytes / (fused_ms * 1e-3) / 1e12, composed_ms);
  CHECK(fused_ms < composed_ms);
}

#endif  // FP8T_WITH_CUDA
