// Fp8GroupedLinear on the CUDA backend (at::_scaled_grouped_mm: lib/fp8/backends/grouped_gemm_cuda.cpp)
// against the CPU emulation, under
// every recipe with a grouped GEMM: the same weights, inputs and group ends on both sides; and a
// mixture-of-experts model's step on the GPU (routing, dispatch and the grouped GEMMs) captured as
// one CUDA graph.
#include <torch/torch.h>  // torch::randn, torch::cuda

#include <memory>  // std::shared_ptr

#include "lib/fp8/layers/fp8_grouped_linear.h"  // Fp8GroupedLinear
#include "lib/fp8/recipes/scaling.h"            // make_scaling
#include "lib/config/fields.h"                  // config::to_string
#include "lib/step/session.h"                   // step::Session
#include "tests/catch.h"
#include "tests/model/moe_test_config.h"  // test::tiny_moe
#include "tests/tensor_compare.h"  // test::rel_err

using namespace fp8t;
using namespace fp8t::fp8;

using fp8t::test::rel_err;

namespace {

struct Side {
  std::shared_ptr<Scaling> scaling;
  std::shared_ptr<Fp8GroupedLinear> layer;
};

Side make(const model::GroupedLinear& src, RecipeKind kind, const at::Device& device) {
  model::GroupedLinear copy(src.groups, src.in_features, src.out_features, 1.0);
  {
    torch::NoGradGuard g;
    copy.weight.copy_(src.weight);
  }
  copy.to(device);
  Recipe r;
  r.kind = kind;
  Side s;
  s.scaling = make_scaling(r);
  s.layer = std::make_shared<Fp8GroupedLinear>(copy, "experts", s.scaling);
  s.scaling->finalize(device);
  return s;
}

}  // namespace

TEST_CASE("fp8 grouped linear on CUDA matches the CPU emulation, empty groups exactly zero", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const at::Device gpu(at::kCUDA, 0);
  for (const RecipeKind kind : {RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kRowwise}) {
    CAPTURE(to_string(kind));
    torch::manual_seed(41);
    model::GroupedLinear src(4, 256, 384, 2.0);
    Side cpu = make(src, kind, at::kCPU), cuda = make(src, kind, gpu);
    // Groups of 48, 16 (padding only), 128 and 64 rows.
    const at::Tensor offsets = torch::tensor({48, 64, 192, 256}, at::kInt);
    at::Tensor x = torch::randn({256, 256});
    x.narrow(0, 48, 16).zero_();
    at::Tensor dy = torch::randn({256, 384}) * 1e-2;
    dy.narrow(0, 48, 16).zero_();
    const at::Tensor xc = x.clone().requires_grad_(), xg = x.to(gpu).requires_grad_();
    const at::Tensor yc = cpu.layer->forward(xc, offsets), yg = cuda.layer->forward(xg, offsets.to(gpu));
    yc.backward(dy);
    yg.backward(dy.to(gpu));
    // The same FP8 codes and scales on both sides (the casts are bit-exact); the grouped kernel
    // accumulates on tensor cores and writes BF16: 1e-2 relative Frobenius (BF16 output rounding
    // is 2^-9 per element; fast accumulation on fprop).
    CHECK(yg.scalar_type() == at::kFloat);
    CHECK(rel_err(yg, yc) < 1e-2);
    CHECK(rel_err(xg.grad(), xc.grad()) < 1e-2);
    const at::Tensor dwg = cuda.layer->weight.grad().cpu(), dwc = cpu.layer->weight.grad();
    CHECK(rel_err(dwg, dwc) < 1e-2);
    CHECK(dwg.isfinite().all().item<bool>());
    CHECK(dwg[1].abs().max().item<double>() == 0.0);  // the group of padding rows only
  }
}

TEST_CASE("a mixture-of-experts step on CUDA runs as one CUDA graph and repeats the eager steps", "[fp8][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  for (const Precision precision : {Precision::kBf16, Precision::kFp8}) {
    CAPTURE(config::to_string(precision));
    ExperimentConfig c;
    c.precision = precision;
    c.model = test::tiny_moe(/*d_model=*/128, /*d_ff=*/128, /*experts=*/8);
    c.model.vocab_size = 128;
    c.model.seq_len = 64;
    c.model.n_head = 4;
    c.model.qk_norm = true;
    c.train.micro_batch_size = 4;
    const at::Device gpu(at::kCUDA, 0);
    auto run = [&](bool graphs) {
      ExperimentConfig cfg = c;
      cfg.train.cuda_graphs = graphs;
      step::Session s(cfg, gpu);
      s.prepare_training(nullptr);
      std::vector<double> losses;
      for (int i = 0; i < 6; ++i) {
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(100 + i);
        const at::Tensor t = at::randint(128, {4, 65}, gen, at::kLong);
        at::Tensor sum = at::zeros({}, at::TensorOptions().device(gpu));
        s.step([&] { return data::Batch{t.narrow(1, 0, 64).contiguous(), t.narrow(1, 1, 64).contiguous()}; }, 1e-3,
               sum, {}, i + 1);
        losses.push_back(sum.item<double>());
      }
      CHECK(s.cuda_graph_active() == graphs);
      return losses;
    };
    const std::vector<double> eager = run(false), graphed = run(true);
    // A replayed graph computes the same kernels on the same data: the same bits.
    CHECK(eager == graphed);
  }
}
