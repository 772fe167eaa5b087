// kernels/rope.cu through ops::rope_qkv (lib/ops/rope_cuda.cpp) and model::Rotary::apply_qkv:
// the fused RoPE of q and k (and the copy of v) gives, bit for bit, what the CPU computes with
// LibTorch's FP32 composition (Rotary::apply on the split q/k/v), forward and backward, in bf16
// and fp32.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>          // at::cuda::getCurrentCUDAStream
#include <c10/cuda/CUDACachingAllocator.h>  // getDeviceStats

#include <cstdio>   // std::printf
#include <string>   // std::string
#include <vector>   // std::vector

#include "fp8t_kernels.h"                  // fp8t_rope, fp8t_last_precondition
#include "lib/model/rope.h"                // model::Rotary
#include "lib/ops/rope.h"                  // ops::rope_qkv, ops::rope_qkv_fused
#include "tests/fp8/swiglu_test_util.h"    // bit_diff
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, on_cuda, reporting, skip_large
#include "tests/kernels/cuda_timing.h"     // median_event_ms

namespace {

using namespace fp8t;
using namespace fp8t::test;

struct Shape {
  int64_t B, T, H, KV, D;
};

// One head group (KV = H, MHA), grouped-query attention, the smallest and a large head dim, and
// a sequence shorter than the table.
const std::vector<Shape> kShapes = {{2, 37, 4, 2, 64}, {1, 16, 2, 2, 16}, {3, 9, 8, 1, 128}, {1, 5, 3, 3, 32}};

void require_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  REQUIRE(got.sizes() == want.sizes());
  const BitDiff d = bit_diff(got.cpu(), want);
  INFO(what << ": " << d.count << " of " << want.numel() << " elements differ, first at " << d.first);
  REQUIRE(d.count == 0);
}

}  // namespace

TEST_CASE("rope: the fused q/k RoPE equals the CPU composition bit for bit, forward and backward", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  for (const at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
    for (const Shape& s : kShapes) {
      INFO(dtype_name(dt) << " B" << s.B << " T" << s.T << " H" << s.H << " KV" << s.KV << " D" << s.D);
      at::manual_seed(s.T * 7 + s.D);
      model::Rotary cpu_rot(s.T + 3, s.D, 10000.0);
      model::Rotary gpu_rot(s.T + 3, s.D, 10000.0);
      gpu_rot.to(at::kCUDA);
      const int64_t C3 = (s.H + 2 * s.KV) * s.D;
      // Activations of a few units, positions far enough for large angles (theta^0 t up to T + 3).
      const at::Tensor qkv = (at::randn({s.B, s.T, C3}) * 2.0).to(dt);
      REQUIRE(ops::rope_qkv_fused(qkv.cuda(), s.H, s.KV, s.D, gpu_rot.cos, gpu_rot.sin));

      const at::Tensor x_cpu = qkv.clone().requires_grad_();
      const at::Tensor x_gpu = qkv.cuda().requires_grad_();
      const model::Rotary::Heads want = cpu_rot.apply_qkv(x_cpu, s.H, s.KV);  // split + apply on the CPU
      const model::Rotary::Heads got = gpu_rot.apply_qkv(x_gpu, s.H, s.KV);   // the kernel
      require_same_bits(got.q, want.q, "q");
      require_same_bits(got.k, want.k, "k");
      require_same_bits(got.v, want.v, "v");

      // Gradients as attention's backward hands them over ([B, h, T, D] tensors); dk through a
      // non-contiguous view (the kernel's strided reads).
      const at::Tensor gq = at::randn(want.q.sizes()).to(dt);
      const at::Tensor gk = at::randn({s.B, s.T, s.KV, s.D}).to(dt).transpose(1, 2);
      const at::Tensor gv = at::randn(want.v.sizes()).to(dt);
      torch::autograd::backward({want.q, want.k, want.v}, {gq, gk, gv});
      torch::autograd::backward({got.q, got.k, got.v}, {gq.cuda(), gk.cuda(), gv.cuda()});
      // Bits equal up to the sign of an exactly zero gradient (autograd adds the halves' terms to
      // a zero-filled tensor): none with these random inputs.
      require_same_bits(x_gpu.grad(), x_cpu.grad(), "dqkv");
    }
  }
}

TEST_CASE("rope: the fused path keeps q, k and v only (the projection's output is released)", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  model::Rotary rot(64, 64, 500000.0);
  rot.to(at::kCUDA);
  const int64_t B = 2, T = 64, H = 8, KV = 2, D = 64, C3 = (H + 2 * KV) * D;
  const int64_t bytes = B * T * C3 * 2;  // one bf16 [B, T, C3]: 196,608 B, a multiple of the allocator's 512
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  auto allocated = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; };
  const int64_t before = allocated();
  model::Rotary::Heads h;
  {
    const at::Tensor qkv = at::randn({B, T, C3}, on_cuda(at::kBFloat16)).requires_grad_();
    const at::Tensor y = qkv * 1.0;  // a non-leaf, as the projection's output is
    h = rot.apply_qkv(y, H, KV);
  }
  // Alive: the leaf (held by the graph) and q, k, v (together one [B, T, C3]); y is gone. The
  // split + view composition keeps y as well (v is a view of it): 3 x bytes.
  CHECK(allocated() - before == 2 * bytes);
  REQUIRE(h.q.sizes() == at::IntArrayRef({B, H, T, D}));
  REQUIRE(h.k.sizes() == at::IntArrayRef({B, KV, T, D}));
  REQUIRE(h.v.transpose(1, 2).is_contiguous());
}

TEST_CASE("rope: refuses what it cannot run, and says why", "[kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  model::Rotary rot(16, 64, 10000.0);
  rot.to(at::kCUDA);
  const at::Tensor qkv = at::randn({1, 16, 6 * 64}, on_cuda(at::kBFloat16));
  CHECK(ops::rope_qkv_fused(qkv, 4, 1, 64, rot.cos, rot.sin));
  CHECK_FALSE(ops::rope_qkv_fused(qkv.to(at::kHalf), 4, 1, 64, rot.cos, rot.sin));        // dtype
  const at::Tensor shifted = at::randn({16 * 6 * 64 + 1}, on_cuda(at::kBFloat16)).narrow(0, 1, 16 * 6 * 64);
  CHECK_FALSE(ops::rope_qkv_fused(shifted.view({1, 16, 6 * 64}), 4, 1, 64, rot.cos, rot.sin));  // 2-byte aligned
  CHECK_FALSE(ops::rope_qkv_fused(qkv, 4, 0, 64, rot.cos, rot.sin));  // no K/V heads
  CHECK_FALSE(ops::rope_qkv_fused(at::randn({1, 17, 6 * 64}, on_cuda(at::kBFloat16)), 4, 1, 64, rot.cos, rot.sin));
  model::Rotary odd(16, 24, 10000.0);
  odd.to(at::kCUDA);
  CHECK_FALSE(ops::rope_qkv_fused(at::randn({1, 16, 6 * 24}, on_cuda(at::kBFloat16)), 4, 1, 24, odd.cos, odd.sin));
  // Such shapes take the composition on the GPU: same values as on the CPU, within bf16 rounding.
  const at::Tensor x24 = at::randn({1, 16, 6 * 24}).to(at::kBFloat16);
  model::Rotary odd_cpu(16, 24, 10000.0);
  const model::Rotary::Heads a = odd.apply_qkv(x24.cuda(), 4, 1), b = odd_cpu.apply_qkv(x24, 4, 1);
  // The same elementwise FP32 operations on both devices (expected bit-equal); at most one bf16 rounding apart.
  CHECK(rel_frobenius(a.q, b.q) <= 4e-3);

  // The launcher names a failed precondition.
  fp8t_rope_part part{};
  part.src = qkv.data_ptr();
  part.dst = qkv.data_ptr();
  part.heads = 1;
  part.op = FP8T_ROPE_ROTATE;
  const cudaError_t st = fp8t_rope(&part, 1, FP8T_DTYPE_BF16, 1, 16, 24, rot.cos.data_ptr<float>(),
                                   rot.sin.data_ptr<float>(), 64, 16, at::cuda::getCurrentCUDAStream().stream());
  CHECK(st == cudaErrorInvalidValue);
  CHECK(std::string(fp8t_last_precondition()).find("multiple of 16") != std::string::npos);
}

// The LLaMA-1B attention's RoPE at B8 T2048 (H32, KV8, D64), fused against the composition it
// replaces, forward + backward (runs with FP8T_TEST_REPORT).
TEST_CASE("rope timing: q/k RoPE of the LLaMA-1B shape, fused against the composition", "[kernels][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  if (!reporting() || skip_large(int64_t{1} << 30)) {
    SKIP("a timing case: it runs with FP8T_TEST_REPORT=1 (and not FP8T_TEST_SMALL)");
  }
  const int64_t B = 8, T = 2048, H = 32, KV = 8, D = 64, C3 = (H + 2 * KV) * D;
  model::Rotary rot(T, D, 500000.0);
  rot.to(at::kCUDA);
  const at::Tensor qkv = at::randn({B, T, C3}, on_cuda(at::kBFloat16)).requires_grad_();
  const at::Tensor gq = at::randn({B, H, T, D}, on_cuda(at::kBFloat16));
  const at::Tensor gk = at::randn({B, KV, T, D}, on_cuda(at::kBFloat16)), gv = at::randn_like(gk);
  auto step = [&](bool fused) {
    const model::Rotary::Heads h = fused ? rot.apply_qkv(qkv, H, KV) : [&] {
      const std::vector<at::Tensor> p = qkv.split_with_sizes({H * D, KV * D, KV * D}, -1);
      return model::Rotary::Heads{rot.apply(p[0].view({B, T, H, D}).transpose(1, 2)),
                                  rot.apply(p[1].view({B, T, KV, D}).transpose(1, 2)),
                                  p[2].view({B, T, KV, D}).transpose(1, 2)};
    }();
    torch::autograd::backward({h.q, h.k, h.v}, {gq, gk, gv});
    qkv.mutable_grad().reset();
  };
  const double fused_ms = median_event_ms(3, 20, [&] { step(true); });
  const double composed_ms = median_event_ms(3, 20, [&] { step(false); });
  // Fused: qkv read and q, k, v written, then dq, dk, dv read and dqkv written: 4 x 100.7 MB.
  const double bytes = 4.0 * B * T * C3 * 2;
  std::printf("rope [8, 2048, 32+8+8 heads of 64] forward + backward: fused %.4f ms (%.2f TB/s), composition %.4f ms\n",
              fused_ms, bytes / (fused_ms * 1e-3) / 1e12, composed_ms);
  CHECK(fused_ms < composed_ms);
}

#endif  // FP8T_WITH_CUDA
