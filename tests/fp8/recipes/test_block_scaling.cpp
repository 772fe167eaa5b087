// lib/fp8/recipes/block_scaling.* on the CPU emulation: what the state class hands out per slot role, its
// statistics, the rewrite rule, and a tiny GPT that trains under block scaling and resumes bit for
// bit (short runs through the library API, one run reused for several assertions).
#include "lib/fp8/recipes/block_scaling.h"

#include <torch/torch.h>  // torch::manual_seed, torch::randint

#include <cmath>    // std::ldexp
#include <fstream>  // std::ifstream
#include <string>   // std::string, std::getline
#include <vector>   // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/fp8/backends/block_backend.h"   // block_gemm
#include "lib/fp8/backends/block_quantize.h"  // block_quantize_cpu, block_dequantize
#include "lib/fp8/layers/fp8_activation.h"    // Fp8Gelu
#include "lib/fp8/rewrite.h"                  // rewrite_to_fp8
#include "lib/model/gpt.h"                    // Gpt
#include "lib/checkpoint/checkpoint.h"        // load_checkpoint
#include "lib/train/trainer.h"                // run_training
#include "tests/catch.h"
#include "tests/temp_dir.h"

using namespace fp8t;
using fp8::BlockScaling;
using fp8::CastOptions;
using fp8::CastSource;
using fp8::ScaleLayout;
using fp8::TensorRole;

namespace {

CastOptions layouts(bool rowwise, bool columnwise) {
  CastOptions o;
  o.rowwise = rowwise;
  o.columnwise = columnwise;
  return o;
}

struct Slots {
  std::shared_ptr<BlockScaling> scaling;
  int input, weight, grad;
};

Slots make_slots(bool pow2 = true) {
  fp8::Recipe r;
  r.kind = fp8::RecipeKind::kBlock;
  r.block_power_of_2_scales = pow2;
  Slots s{std::make_shared<BlockScaling>(r), 0, 0, 0};
  s.input = s.scaling->add_slot("fc:input", TensorRole::kInput);
  s.weight = s.scaling->add_slot("fc:weight", TensorRole::kWeight);
  s.grad = s.scaling->add_slot("fc:grad_output", TensorRole::kGradOutput);
  s.scaling->finalize(at::kCPU);
  return s;
}

config::LoadedConfig tiny_block_run(const std::string& out_dir, const std::string& name) {
  config::LoadedConfig c;
  c.config.run.out_dir = out_dir;
  c.config.run.name = name;
  c.config.run.quiet = true;
  c.config.run.device = DeviceKind::kCpu;
  c.config.precision = Precision::kFp8;
  c.config.fp8.kind = fp8::RecipeKind::kBlock;
  c.config.fp8.stats = true;
  c.config.model.n_layer = 1;
  c.config.model.d_model = 32;  // Linear dims 32..128: multiples of 16, partial 128-blocks
  c.config.model.n_head = 2;
  c.config.model.seq_len = 16;
  c.config.train.steps = 12;
  c.config.train.micro_batch_size = 4;
  c.config.train.grad_accum_steps = 2;  // the weight cache across micro-batches
  c.config.train.warmup_steps = 2;
  c.config.train.log_interval = 1;
  c.config.train.eval_interval = 0;
  return c;
}

std::vector<nlohmann::json> rows_with_loss(const std::filesystem::path& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line);
    if (row.contains("loss")) out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

TEST_CASE("block scaling: slots get E4M3 1x128 (activations, gradients) or 128x128 (weights)", "[fp8]") {
  Slots s = make_slots();
  REQUIRE(s.scaling->kind() == fp8::RecipeKind::kBlock);
  REQUIRE(s.scaling->slot_format(s.grad) == fp8::Format::kE4M3);  // also under HYBRID
  REQUIRE_FALSE(s.scaling->fast_accumulation(fp8::GemmKind::kFprop));
  at::manual_seed(1);
  const at::Tensor x = at::randn({24, 160}), w = at::randn({48, 160}), dy = at::randn({24, 48});
  const fp8::Fp8Tensor xq = s.scaling->quantize(s.input, CastSource::tensor(x), layouts(true, true));
  REQUIRE(xq.rowwise.scale_layout == ScaleLayout::kBlock1x128);
  REQUIRE(xq.columnwise.scale_layout == ScaleLayout::kBlock1x128);
  REQUIRE(xq.columnwise.codes.sizes() == at::IntArrayRef{160, 24});
  REQUIRE(at::equal(xq.rowwise.codes, fp8::block_quantize_cpu(x, 1, true, false, true).rowwise.codes));
  const fp8::Fp8Tensor wq = s.scaling->quantize(s.weight, CastSource::tensor(w), layouts(true, true));
  REQUIRE(wq.rowwise.scale_layout == ScaleLayout::kBlock128x128);
  REQUIRE(wq.rowwise.scale_inv.sizes() == at::IntArrayRef{1, 2});
  at::Tensor dbias;
  CastOptions grad_opt = layouts(true, true);
  grad_opt.dbias = &dbias;
  const fp8::Fp8Tensor dyq = s.scaling->quantize(s.grad, CastSource::tensor(dy), grad_opt);
  REQUIRE(at::allclose(dbias, dy.sum(0)));
  REQUIRE(dyq.columnwise.codes.sizes() == at::IntArrayRef{48, 24});
  // The three GEMMs on the emulation: FP32 products of the block-dequantized operands.
  const at::Tensor y = fp8::block_gemm(xq.rowwise, wq.rowwise, at::Tensor(), at::kFloat, fp8::GemmKind::kFprop);
  const at::Tensor ref = at::mm(fp8::block_dequantize({xq.rowwise.codes, xq.rowwise.scale_inv}, 1),
                                fp8::block_dequantize({wq.rowwise.codes, wq.rowwise.scale_inv}, 128).t());
  REQUIRE(at::equal(y, ref));
  REQUIRE(fp8::block_gemm(dyq.rowwise, wq.columnwise, at::Tensor(), at::kFloat, fp8::GemmKind::kDgrad).sizes() ==
          at::IntArrayRef{24, 160});
  const at::Tensor dw = fp8::block_gemm(dyq.columnwise, xq.columnwise, at::Tensor(), at::kFloat, fp8::GemmKind::kWgrad);
  // Block quantization of these normal values keeps dW within a few E4M3 steps of the exact product.
  REQUIRE(((dw - at::mm(dy.t(), x)).norm() / at::mm(dy.t(), x).norm()).item<double>() < 0.1);
  REQUIRE_THROWS_WITH(fp8::block_gemm(wq.rowwise, wq.rowwise, at::Tensor(), at::kFloat, fp8::GemmKind::kFprop),
                      FP8T_CONTAINS("128x128 x 128x128"));
}

TEST_CASE("block scaling: statistics per slot (saturation, underflow, block-scale range), not under no-record",
          "[fp8]") {
  Slots s = make_slots();
  s.scaling->set_collect_stats(true);
  at::Tensor x = at::ones({8, 256});
  x[0][0] = std::numeric_limits<float>::infinity();  // saturates; its block gets scale 1
  x[1].fill_(1e-3f);                                 // scale 2^18
  x[2][5] = 1e-9f;                                   // flushed to zero next to ones
  {
    fp8::NoRecordScope no_record;
    (void)s.scaling->quantize(s.input, CastSource::tensor(x * 1e6), layouts(true, false));
  }
  (void)s.scaling->quantize(s.input, CastSource::tensor(x), layouts(true, false));
  const auto stats = s.scaling->read_stats();
  REQUIRE(stats.size() == 3);
  REQUIRE(stats[0].name == "fc:input");
  REQUIRE(stats[0].saturated == Approx(1.0 / 2048));
  REQUIRE(stats[0].underflow == Approx(1.0 / 2048));
  REQUIRE(stats[0].min_block_scale.value() == 1.0f);
  REQUIRE(stats[0].max_block_scale.value() == std::ldexp(1.0f, 18));  // 448/1e-3 = 448000 -> 2^18
  REQUIRE_FALSE(stats[1].min_block_scale.has_value());  // the weight slot saw no cast
  REQUIRE_FALSE(s.scaling->read_stats()[0].min_block_scale.has_value());  // reset by the read
}

TEST_CASE("block scaling: the rewrite rule is the block GEMM's (K and N multiples of 16)", "[fp8]") {
  Slots s = make_slots();
  REQUIRE(s.scaling->unsupported_linear(768, 3072).empty());
  REQUIRE(s.scaling->unsupported_linear(48, 336).empty());  // partial 128-blocks are fine
  REQUIRE_THAT(s.scaling->unsupported_linear(100, 64), FP8T_CONTAINS("not multiples of 16"));
}

TEST_CASE("block scaling: a tiny GPT trains on the CPU emulation and resumes bit for bit", "[fp8]") {
  test::TempDir tmp("block_scaling_resume");
  const auto straight = tiny_block_run(tmp.path().string(), "straight");
  REQUIRE(train::run_training(straight, {})["status"] == "completed");
  const auto split = tiny_block_run(tmp.path().string(), "split");
  train::TrainOptions first;
  first.stop_after = 5;
  REQUIRE(train::run_training(split, first)["status"] == "stopped");
  REQUIRE(checkpoint::load_checkpoint(tmp.path() / "split" / "checkpoint.pt").meta.at("fp8_recipe") == "block");
  train::TrainOptions resume;
  resume.resume = true;
  REQUIRE(train::run_training(split, resume)["status"] == "completed");

  const auto a = rows_with_loss(tmp.path() / "straight" / "metrics.jsonl");
  const auto b = rows_with_loss(tmp.path() / "split" / "metrics.jsonl");
  REQUIRE(a.size() == 12);
  REQUIRE(a.back()["loss"].get<double>() < a.front()["loss"].get<double>());  // it trains
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i]["loss"].dump() == b[i]["loss"].dump());
  // --fp8-stats under block: the block-scale range of some slot on every logged row.
  REQUIRE(a.back().dump().find("block_scale_max") != std::string::npos);
}

TEST_CASE("block scaling: GELU and GELU-backward sources cast as their LibTorch values, with dbias (CPU)", "[fp8]") {
  Slots s = make_slots();
  at::manual_seed(3);
  const at::Tensor h = at::randn({40, 272}) * 3, dy = at::randn({40, 272});
  const fp8::Fp8Tensor g = s.scaling->quantize(s.input, CastSource::gelu(h), layouts(true, true));
  const fp8::BlockQuantized gw = fp8::block_quantize_cpu(at::gelu(h, "tanh"), 1, true, true, true);
  REQUIRE(at::equal(g.rowwise.codes, gw.rowwise.codes));
  REQUIRE(at::equal(g.columnwise.codes, gw.columnwise.codes));
  REQUIRE(at::equal(g.columnwise.scale_inv, gw.columnwise.scale_inv));
  at::Tensor dbias;
  CastOptions grad_opt = layouts(true, true);
  grad_opt.dbias = &dbias;
  const fp8::Fp8Tensor d = s.scaling->quantize(s.grad, CastSource::dgelu(dy, h), grad_opt);
  const at::Tensor dh = at::gelu_backward(dy, h, "tanh");
  const fp8::BlockQuantized dw = fp8::block_quantize_cpu(dh, 1, true, true, true);
  REQUIRE(at::equal(d.rowwise.codes, dw.rowwise.codes));
  REQUIRE(at::equal(d.columnwise.scale_inv, dw.columnwise.scale_inv));
  REQUIRE(at::equal(dbias, dh.sum(0)));  // the same FP32 reduction of the same tensor
}

namespace {

// A tiny GPT with bias twice from one seed under block scaling; in `plain` the activations are
// put back as the model's own GELU, so its Linears block-cast GELU's output and gradient themselves.
struct BlockTwins {
  std::shared_ptr<model::Gpt> fused, plain;
  fp8::RewriteResult fused_rw, plain_rw;
  explicit BlockTwins(const at::Device& device) {
    ModelSection m;
    m.vocab_size = 64;
    m.seq_len = 16;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_model = 32;  // c_fc 32x128: multiples of 16 (the block GEMMs' rule)
    m.bias = true;
    fp8::Recipe recipe;
    recipe.kind = fp8::RecipeKind::kBlock;
    for (auto* side : {&fused, &plain}) {
      torch::manual_seed(21);
      *side = std::make_shared<model::Gpt>(m);
      (*side)->to(device);
    }
    fused_rw = fp8::rewrite_to_fp8(*fused, recipe, device);
    plain_rw = fp8::rewrite_to_fp8(*plain, recipe, device);
    for (auto& b : plain->blocks) {
      b->mlp->replace_slot("act", std::make_shared<model::Activation>(model::Activation::Kind::kGeluTanh));
    }
  }
  // One forward/backward of both on the same tokens (48 per batch: a multiple of 16).
  std::pair<at::Tensor, at::Tensor> step(const at::Tensor& idx) {
    const auto run = [&](model::Gpt& gpt) {
      const at::Tensor loss = model::Gpt::loss(gpt.forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
      loss.backward();
      return loss.detach();
    };
    return {run(*fused), run(*plain)};
  }
};

}  // namespace

TEST_CASE("block scaling: a GPT's GELU fused into the block casts computes bit for bit what the unfused one does (CPU)",
          "[fp8]") {
  BlockTwins t(at::kCPU);
  REQUIRE(t.fused_rw.report.fused_activations == 2);
  REQUIRE(std::dynamic_pointer_cast<fp8::Fp8Gelu>(t.fused->blocks[0]->dense_mlp()->act) != nullptr);
  torch::manual_seed(4);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const auto [lf, lp] = t.step(torch::randint(0, 64, {3, 17}));
    REQUIRE(at::equal(lf, lp));
    const auto pp = t.plain->named_parameters();
    for (const auto& item : t.fused->named_parameters()) {
      INFO(item.key());
      REQUIRE(at::equal(item.value().grad(), pp[item.key()].grad()));
    }
    t.fused_rw.scaling->end_micro_batch(true);
    t.plain_rw.scaling->end_micro_batch(true);
    t.fused->zero_grad();
    t.plain->zero_grad();
  }
}
