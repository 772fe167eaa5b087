// lib/fp8/recipes/current_scaling.* on the GPU: every current-scaling cast (plain, gradient with dbias,
// the norm's output with its fused amax, the GELU, GELU-backward, SwiGLU and SwiGLU-backward
// casts, the norm's two passes) against the CPU emulation, bit for bit where the CPU computes the same values (amax,
// scale, codes); each cast's amax and scale come from one launch (kernels/amax.cu), whose
// workspace must leave consecutive casts independent.
#if defined(FP8T_WITH_CUDA)

#include <cmath>   // std::ldexp, std::isnan
#include <limits>  // std::numeric_limits
#include <vector>  // std::vector

#include "lib/fp8/backends/cuda_backend.h"    // cuda_backend
#include "lib/fp8/recipes/current_scaling.h"  // CurrentScaling
#include "lib/numerics/scaling_math.h"        // current_scale
#include "tests/fp8/swiglu_test_util.h"       // math_swiglu, math_swiglu_backward
#include "tests/kernels/cuda_test_util.h"

namespace {

using namespace fp8t::fp8;
using namespace fp8t::test;

Recipe current_recipe() {
  Recipe r;
  r.kind = RecipeKind::kCurrent;
  return r;
}

// One scaling state with an input slot (E4M3) and a gradient slot (E5M2) on `device`.
struct Pair {
  std::shared_ptr<Scaling> s;
  int in, grad;
  explicit Pair(const at::Device& device) : s(make_scaling(current_recipe())) {
    in = s->add_slot("x:input", TensorRole::kInput);
    grad = s->add_slot("x:grad_output", TensorRole::kGradOutput);
    s->finalize(device);
  }
  float amax(int slot) const { return s->amax_history()[0][slot].item<float>(); }
  float scale(int slot) const { return s->scale()[slot].item<float>(); }
};

CastOptions both_layouts(at::Tensor* dbias = nullptr) {
  CastOptions o;
  o.columnwise = true;
  o.dbias = dbias;
  return o;
}

void require_same_state(const Pair& gpu, const Pair& cpu, int slot) {
  REQUIRE(same_bits(gpu.amax(slot), cpu.amax(slot)));
  REQUIRE(same_bits(gpu.scale(slot), cpu.scale(slot)));
}

void require_same_tensor_codes(const Fp8Tensor& g, const Fp8Tensor& c) {
  REQUIRE(at::equal(g.rowwise.codes.cpu(), c.rowwise.codes));
  REQUIRE(at::equal(g.columnwise.codes.cpu(), c.columnwise.codes));
  REQUIRE(same_bits(g.rowwise.scale_inv.item<float>(), c.rowwise.scale_inv.item<float>()));
}

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 16}, {60, 160}, {217, 256}, {13, 7}, {130, 200},
                                                          {2056, 4160}};

at::Tensor spread_values(int64_t rows, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, cols}) * at::pow(2.0, at::randint(-12, 6, {rows, cols}).to(at::kFloat));
  x.view({-1}).slice(0, 0, x.numel(), 13).zero_();
  return x;
}

}  // namespace

TEST_CASE("current scaling on CUDA: plain and gradient casts equal the CPU emulation bit for bit",
          "[fp8][cuda]") {
  FP8T_REQUIRE_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, cols] : kShapes) {
      if (skip_large(rows * cols)) continue;
      CAPTURE(dtype_name(dt), rows, cols);
      const at::Tensor x = spread_values(rows, cols, rows * 7 + cols).to(dt);
      Pair gpu(at::kCUDA), cpu(at::kCPU);
      const Fp8Tensor g = gpu.s->quantize(gpu.in, CastSource::tensor(x.cuda()), both_layouts());
      const Fp8Tensor c = cpu.s->quantize(cpu.in, CastSource::tensor(x), both_layouts());
      require_same_state(gpu, cpu, gpu.in);
      require_same_tensor_codes(g, c);

      at::Tensor dbias_g, dbias_c;
      const Fp8Tensor gg = gpu.s->quantize(gpu.grad, CastSource::tensor(x.cuda()), both_layouts(&dbias_g));
      const Fp8Tensor cg = cpu.s->quantize(cpu.grad, CastSource::tensor(x), both_layouts(&dbias_c));
      require_same_state(gpu, cpu, gpu.grad);
      require_same_tensor_codes(gg, cg);
      // dbias: an FP32 sum in another order (tiles of 64 rows): within rows * 2^-24 of sum |x|.
      const at::Tensor bound = x.to(at::kDouble).abs().sum(0) * (rows * std::ldexp(1.0, -24)) + 1e-30;
      REQUIRE(((dbias_g.cpu().to(at::kDouble) - dbias_c.to(at::kDouble)).abs() <= bound).all().item<bool>());
    }
  }
}

TEST_CASE("current scaling on CUDA: the norm's fused amax and the cast of its output", "[fp8][cuda]") {
  FP8T_REQUIRE_GPU();
  Backend& backend = cuda_backend();
  for (bool rms : {false, true}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const auto& [rows, cols] : kShapes) {
        if (skip_large(rows * cols)) continue;
        CAPTURE(rms, dtype_name(dt), rows, cols);
        at::manual_seed(rows * 3 + cols);
        const at::Tensor x = (at::randn({rows, cols}) * 3.0 + 1.0).to(dt).cuda();
        const at::Tensor gamma = (1.0 + 0.1 * at::randn({cols})).cuda(), beta = (0.1 * at::randn({cols})).cuda();
        // What Fp8Norm does when the recipe has no scale before the kernel runs.
        CastOptions opt = both_layouts();
        opt.known_amax = at::zeros({}, on_cuda(at::kFloat));
        const NormForwardResult r = backend.norm_forward(x, gamma, beta, 1e-5, rms, nullptr, true, opt.known_amax);
        REQUIRE(same_bits(opt.known_amax.item<float>(), host_amax(r.y, 0.0f)));  // fused into the norm kernel
        Pair gpu(at::kCUDA), cpu(at::kCPU);
        const Fp8Tensor g = gpu.s->quantize(gpu.in, CastSource::tensor(r.y), opt);
        const Fp8Tensor c = cpu.s->quantize(cpu.in, CastSource::tensor(r.y.cpu()), both_layouts());
        require_same_state(gpu, cpu, gpu.in);
        require_same_tensor_codes(g, c);
      }
    }
  }
}

TEST_CASE("current scaling on CUDA: the norm's two passes (amax alone, then the cast in a second norm) give the "
          "codes of a cast of its output",
          "[fp8][cuda]") {
  // What Fp8Norm does under current scaling when nothing reads y: the first pass writes no y, the
  // second normalises the stored input (x, or r = x + h from the fused add) with the scale from
  // the first pass's amax. Against the CPU emulation's cast of the y a one-pass norm writes.
  FP8T_REQUIRE_GPU();
  Backend& backend = cuda_backend();
  for (bool rms : {false, true}) {
    for (bool add : {false, true}) {
      for (const auto& [rows, cols] : kShapes) {
        if (skip_large(rows * cols)) continue;
        CAPTURE(rms, add, rows, cols);
        at::manual_seed(rows * 5 + cols);
        const at::Tensor x = (at::randn({rows, cols}) * 3.0 + 1.0).cuda();
        const at::Tensor h = (at::randn({rows, cols}) * 2.0).to(at::kBFloat16).cuda();
        const at::Tensor gamma = (1.0 + 0.1 * at::randn({cols})).cuda(), beta = (0.1 * at::randn({cols})).cuda();
        auto norm = [&](const SlotRef* slot, bool write_y, const at::Tensor& amax) {
          return add ? backend.add_norm_forward(x, h, gamma, beta, 1e-5, rms, slot, write_y, amax)
                     : backend.norm_forward(x, gamma, beta, 1e-5, rms, slot, write_y, amax);
        };
        const at::Tensor one_pass_amax = at::zeros({}, on_cuda(at::kFloat));
        const at::Tensor y = norm(nullptr, true, one_pass_amax).y;  // the one-pass y, for the reference
        const at::Tensor known = at::zeros({}, on_cuda(at::kFloat));
        const NormForwardResult first = norm(nullptr, /*write_y=*/false, known);
        REQUIRE(!first.y.defined());  // no y written
        REQUIRE(same_bits(known.item<float>(), one_pass_amax.item<float>()));
        Pair gpu(at::kCUDA), cpu(at::kCPU);
        const SlotRef slot = gpu.s->slot_for_known_amax(gpu.in, known, /*record=*/true);
        const NormForwardResult second =
            backend.norm_forward(add ? first.sum : x, gamma, beta, 1e-5, rms, &slot, /*write_y=*/false);
        const Fp8Tensor c = cpu.s->quantize(cpu.in, CastSource::tensor(y.cpu()), both_layouts());
        require_same_state(gpu, cpu, gpu.in);
        require_same_tensor_codes(second.y_fp8, c);
        REQUIRE(at::equal(second.rstd, first.rstd));  // the same statistics in both passes
      }
    }
  }
}

TEST_CASE("current scaling on CUDA: GELU and GELU-backward casts take the amax of the fused value",
          "[fp8][cuda]") {
  // The fused kernels evaluate GELU in FP32 and may round an element one ulp away from LibTorch's
  // operator (tests/kernels/test_cast_transpose.cpp), so the reference here is the GPU's own
  // fused value: the amax pass must equal the amax the fused cast records, the scale must be
  // scaling_math.h's current_scale of it, and the codes those of the fused cast with that scale.
  FP8T_REQUIRE_GPU();
  Backend& backend = cuda_backend();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, cols] : kShapes) {
      if (skip_large(rows * cols)) continue;
      CAPTURE(dtype_name(dt), rows, cols);
      at::manual_seed(rows * 11 + cols);
      const at::Tensor h = (at::randn({rows, cols}) * 3.0).to(dt).cuda();
      const at::Tensor dy = spread_values(rows, cols, rows + cols).to(dt).cuda();
      Pair gpu(at::kCUDA);
      const Fp8Tensor fwd = gpu.s->quantize(gpu.in, CastSource::gelu(h), both_layouts());
      at::Tensor dbias;
      const Fp8Tensor bwd = gpu.s->quantize(gpu.grad, CastSource::dgelu(dy, h), both_layouts(&dbias));

      for (const bool backward : {false, true}) {
        const int slot = backward ? gpu.grad : gpu.in;
        SlotRef probe;
        probe.scale = at::ones({}, on_cuda(at::kFloat));
        probe.amax = at::zeros({}, on_cuda(at::kFloat));
        probe.format = backward ? Format::kE5M2 : Format::kE4M3;
        at::Tensor unused;
        backend.quantize(backward ? CastSource::dgelu(dy, h) : CastSource::gelu(h), probe, {true, true, &unused});
        REQUIRE(same_bits(gpu.amax(slot), probe.amax.item<float>()));
        REQUIRE(same_bits(gpu.scale(slot), current_scale(gpu.amax(slot), format_max(probe.format), 1.0f)));
        probe.scale.fill_(gpu.scale(slot));
        const Fp8Tensor want =
            backend.quantize(backward ? CastSource::dgelu(dy, h) : CastSource::gelu(h), probe, {true, true, &unused});
        require_same_tensor_codes(backward ? bwd : fwd, Fp8Tensor{
                                                            {want.rowwise.codes.cpu(), want.rowwise.scale_inv,
                                                             want.rowwise.format, want.rowwise.scale_layout},
                                                            {want.columnwise.codes.cpu(), want.columnwise.scale_inv,
                                                             want.columnwise.format, want.columnwise.scale_layout}});
      }
    }
  }
}

TEST_CASE("current scaling on CUDA: SwiGLU and SwiGLU-backward casts take the amax of the fused value",
          "[fp8][cuda]") {
  // swiglu_math.h's values are the CPU reference bit for bit (tests/kernels/test_swiglu_cast.cpp):
  // the amax must be the host amax of them, the scale current_scale of it, and the codes (and the
  // backward's dbias) those of the fused cast with that scale.
  FP8T_REQUIRE_GPU();
  Backend& backend = cuda_backend();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 16}, {13, 7}, {130, 200}, {217, 256}, {2056, 2080}};
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (const auto& [rows, f] : shapes) {
      if (skip_large(rows * f * 2)) continue;
      CAPTURE(dtype_name(dt), rows, f);
      at::manual_seed(rows * 13 + f);
      const at::Tensor h = (at::randn({rows, 2 * f}) * 3.0).to(dt);
      const at::Tensor dy = spread_values(rows, f, rows + 3 * f).to(dt);
      Pair gpu(at::kCUDA);
      const Fp8Tensor fwd = gpu.s->quantize(gpu.in, CastSource::swiglu(h.cuda()), both_layouts());
      at::Tensor dbias;
      const Fp8Tensor bwd = gpu.s->quantize(gpu.grad, CastSource::dswiglu(dy.cuda(), h.cuda()), both_layouts(&dbias));
      for (const bool backward : {false, true}) {
        const int slot = backward ? gpu.grad : gpu.in;
        const float want = host_amax(backward ? math_swiglu_backward(dy, h) : math_swiglu(h), 0.0f);
        REQUIRE(same_bits(gpu.amax(slot), want));
        SlotRef probe;
        probe.format = backward ? Format::kE5M2 : Format::kE4M3;
        REQUIRE(same_bits(gpu.scale(slot), current_scale(want, format_max(probe.format), 1.0f)));
        probe.scale = at::full({}, gpu.scale(slot), on_cuda(at::kFloat));
        probe.amax = at::zeros({}, on_cuda(at::kFloat));
        at::Tensor unused;
        const CastSource src = backward ? CastSource::dswiglu(dy.cuda(), h.cuda()) : CastSource::swiglu(h.cuda());
        const Fp8Tensor ref = backend.quantize(src, probe, {true, true, &unused});
        const Fp8Tensor& got = backward ? bwd : fwd;
        REQUIRE(at::equal(got.rowwise.codes.cpu(), ref.rowwise.codes.cpu()));
        REQUIRE(at::equal(got.columnwise.codes.cpu(), ref.columnwise.codes.cpu()));
        // The recipe casts the value its amax pass wrote (the plain cast with dbias); the fused
        // cast's dbias follows the same summation order, so the sums agree bit for bit.
        if (backward) REQUIRE(at::equal(dbias.cpu(), unused.cpu()));
      }
    }
  }
}

TEST_CASE("current scaling on CUDA: consecutive casts of one slot are independent, recording or not",
          "[fp8][cuda]") {
  // Each slot's amax kernel keeps an accumulator and a CTA ticket between casts: a large amax
  // must not leak into the next cast of the slot, and casts that do not record (NoRecordScope)
  // use their own workspace and leave the recorded state alone.
  FP8T_REQUIRE_GPU();
  Pair gpu(at::kCUDA), cpu(at::kCPU);
  for (double magnitude : {1e6, 1e-3, 0.0, 7.0}) {
    CAPTURE(magnitude);
    const at::Tensor x = spread_values(300, 520, static_cast<uint64_t>(magnitude * 10) + 1) * magnitude;
    const Fp8Tensor g = gpu.s->quantize(gpu.in, CastSource::tensor(x.cuda()), both_layouts());
    const Fp8Tensor c = cpu.s->quantize(cpu.in, CastSource::tensor(x), both_layouts());
    require_same_state(gpu, cpu, gpu.in);
    require_same_tensor_codes(g, c);
    {
      const NoRecordScope no_record;
      const at::Tensor other = spread_values(64, 64, 5) * 1e4;
      const Fp8Tensor q = gpu.s->quantize(gpu.in, CastSource::tensor(other.cuda()), both_layouts());
      const Fp8Tensor want = cpu.s->quantize(cpu.in, CastSource::tensor(other), both_layouts());
      require_same_tensor_codes(q, want);
    }
    require_same_state(gpu, cpu, gpu.in);  // the scratch cast recorded nothing
  }
}

TEST_CASE("current scaling on CUDA: an infinite element gives a NaN scale and NaN codes, as on the CPU",
          "[fp8][cuda]") {
  FP8T_REQUIRE_GPU();
  at::Tensor x = at::ones({64, 64});
  x[5][7] = std::numeric_limits<float>::infinity();
  Pair gpu(at::kCUDA);
  const Fp8Tensor q = gpu.s->quantize(gpu.in, CastSource::tensor(x.cuda()), both_layouts());
  REQUIRE(std::isnan(gpu.scale(gpu.in)));
  REQUIRE((q.rowwise.codes.cpu().bitwise_and(0x7f) == 0x7f).all().item<bool>());  // E4M3 NaN: S.1111.111
}

#endif  // FP8T_WITH_CUDA
