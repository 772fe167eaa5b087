// The row-wise recipe on the CPU emulation (lib/fp8/recipes/rowwise_scaling.h): the casts against a
// reference written here from the formula (lib/numerics/rowwise_math.h) with LibTorch ops, the
// GEMM against the dequantized product, a Linear's three GEMMs, and a tiny GPT trained end to end
// under the registry's name, resumed bit for bit.
#include "lib/fp8/recipes/rowwise_scaling.h"

#include <torch/torch.h>  // torch::manual_seed, torch::randn

#include <cmath>       // std::ldexp, std::nanf
#include <filesystem>  // std::filesystem::path
#include <fstream>     // std::ifstream
#include <limits>      // std::numeric_limits
#include <memory>      // std::make_shared
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/fp8/backends/cpu_backend.h"       // decode_codes
#include "lib/fp8/backends/rowwise_quantize.h"  // rowwise_quantize_cpu, rowwise_gemm, rowwise_dequantize
#include "lib/fp8/layers/fp8_linear.h"          // Fp8Linear
#include "lib/checkpoint/checkpoint.h"          // load_checkpoint
#include "lib/train/trainer.h"                  // run_training
#include "tests/catch.h"
#include "tests/temp_dir.h"

using namespace fp8t;
using fp8::CastOptions;
using fp8::CastSource;
using fp8::Fp8Operand;
using fp8::Fp8Tensor;
using fp8::RowwiseScaling;
using fp8::ScaleLayout;
using fp8::TensorRole;

namespace {

// The formula with LibTorch ops, one row at a time: amax over the row (NaN ignored), scale =
// 448 / amax rounded down to a power of two (1 for amax 0 or inf), codes = E4M3(x * scale) with
// round to nearest even and saturation (at::Float8_e4m3fn rounds to nearest even; saturation and
// NaN are applied here, as fp8::encode_e4m3 does).
struct Reference {
  at::Tensor values;     // the dequantized codes, float32 [rows, K]
  at::Tensor scale_inv;  // [rows]
};

Reference reference_cast(const at::Tensor& x) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor abs = at::where(at::isnan(xf), at::zeros_like(xf), xf.abs());
  const at::Tensor amax = std::get<0>(abs.max(1));
  at::Tensor scale = at::full_like(amax, 448.0f) / amax;
  scale = at::where((amax == 0) | at::isinf(amax), at::ones_like(scale), scale);
  scale = at::where(at::isinf(scale), at::full_like(scale, 3.4028234663852886e38f), scale);
  // Rounded down to a power of two in double: float32's log2 of a scale just below 2^k rounds to k.
  scale = at::exp2(at::floor(at::log2(scale.to(at::kDouble)))).to(at::kFloat);
  const at::Tensor scaled = (xf * scale.unsqueeze(1)).clamp(-448.0, 448.0);
  at::Tensor q = scaled.to(at::kFloat8_e4m3fn).to(at::kFloat);
  q = at::where(at::isnan(xf), xf, q);
  return {q * (1.0f / scale).unsqueeze(1), 1.0f / scale};
}

void require_matches_reference(const Fp8Operand& op, const at::Tensor& x) {
  REQUIRE(op.scale_layout == ScaleLayout::kRowwise);
  REQUIRE(op.format == fp8::Format::kE4M3);
  REQUIRE(op.codes.sizes() == x.sizes());
  REQUIRE(op.scale_inv.sizes() == at::IntArrayRef{x.size(0)});
  const Reference want = reference_cast(x);
  REQUIRE(at::equal(op.scale_inv, want.scale_inv));
  const at::Tensor got = fp8::rowwise_dequantize(op);
  // NaN positions compare unequal: both sides keep them at the same places.
  REQUIRE(at::equal(at::isnan(got), at::isnan(want.values)));
  REQUIRE(at::equal(at::nan_to_num(got), at::nan_to_num(want.values)));
}

struct Slots {
  std::shared_ptr<RowwiseScaling> scaling;
  int input, weight, grad;
};

Slots make_slots() {
  fp8::Recipe r;
  r.kind = fp8::RecipeKind::kRowwise;
  Slots s{std::make_shared<RowwiseScaling>(r), 0, 0, 0};
  s.input = s.scaling->add_slot("fc:input", TensorRole::kInput);
  s.weight = s.scaling->add_slot("fc:weight", TensorRole::kWeight);
  s.grad = s.scaling->add_slot("fc:grad_output", TensorRole::kGradOutput);
  s.scaling->finalize(at::kCPU);
  return s;
}

// Rows spanning 2^-20 .. 2^20, with zero, NaN, infinite and subnormal-amax rows.
at::Tensor hostile_rows(int64_t rows, int64_t cols) {
  at::Tensor x = torch::randn({rows, cols}) * at::pow(2.0, torch::randint(-20, 20, {rows, 1}));
  x[0].zero_();
  x[1][3] = std::nanf("");
  x[2][5] = std::numeric_limits<float>::infinity();
  x[3].fill_(1e-40f);  // float32 subnormals: 448 / amax overflows, the scale is FLT_MAX rounded down
  return x;
}

config::LoadedConfig tiny_rowwise_run(const std::string& out_dir, const std::string& name) {
  config::LoadedConfig c;
  c.config.run.out_dir = out_dir;
  c.config.run.name = name;
  c.config.run.quiet = true;
  c.config.run.device = DeviceKind::kCpu;
  c.config.precision = Precision::kFp8;
  c.config.fp8.kind = fp8::RecipeKind::kRowwise;
  c.config.fp8.stats = true;
  c.config.model.n_layer = 1;
  c.config.model.d_model = 32;  // Linear dims 32..128: multiples of 16
  c.config.model.n_head = 2;
  c.config.model.seq_len = 16;
  c.config.train.steps = 10;
  c.config.train.micro_batch_size = 4;
  c.config.train.grad_accum_steps = 2;  // the weight cache across micro-batches
  c.config.train.warmup_steps = 2;
  c.config.train.log_interval = 1;
  c.config.train.eval_interval = 0;
  return c;
}

}  // namespace

TEST_CASE("rowwise scaling: each row and each column gets its own power-of-2 scale, as the formula says (CPU)",
          "[fp8]") {
  torch::manual_seed(3);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    INFO("dtype " << dtype);
    const at::Tensor x = hostile_rows(40, 48).to(dtype);
    const Fp8Tensor q = fp8::rowwise_quantize_cpu(x, true, true);
    require_matches_reference(q.rowwise, x);
    require_matches_reference(q.columnwise, x.t());
    // The planted rows: zero -> scale 1 and zero codes; inf -> scale 1 (the inf saturates to 448).
    CHECK(q.rowwise.scale_inv[0].item<float>() == 1.0f);
    CHECK(q.rowwise.scale_inv[2].item<float>() == 1.0f);
    CHECK(fp8::decode_codes(q.rowwise.codes, fp8::Format::kE4M3)[2][5].item<float>() == 448.0f);
  }
  // The bf16 overflow value: a subnormal-amax bf16 row takes bf16's largest finite, rounded down.
  const at::Tensor tiny = at::full({1, 16}, 1e-39f).to(at::kBFloat16);
  CHECK(fp8::rowwise_quantize_cpu(tiny, true, false).rowwise.scale_inv[0].item<float>() == std::ldexp(1.0f, -127));
}

TEST_CASE("rowwise scaling: the GEMM is the product of the dequantized operands, in the Linear's three shapes (CPU)",
          "[fp8]") {
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({24, 64}) * at::pow(2.0, torch::randint(-6, 6, {24, 1}));
  const at::Tensor w = torch::randn({32, 64});
  const at::Tensor dy = torch::randn({24, 32});
  const Fp8Tensor qx = fp8::rowwise_quantize_cpu(x, true, true);
  const Fp8Tensor qw = fp8::rowwise_quantize_cpu(w, true, true);
  const Fp8Tensor qdy = fp8::rowwise_quantize_cpu(dy, true, true);
  const auto dq = [](const Fp8Operand& op) { return fp8::rowwise_dequantize(op).to(at::kDouble); };
  // FP32 sums of exact products against the same products summed in double: 1e-6 relative covers
  // float32 accumulation over K <= 64.
  const auto close = [](const at::Tensor& got, const at::Tensor& want) {
    return ((got.to(at::kDouble) - want).abs().max() <= 1e-6 * want.abs().max()).item<bool>();
  };
  const at::Tensor bias = torch::randn({32});
  CHECK(close(fp8::rowwise_gemm(qx.rowwise, qw.rowwise, bias, at::kFloat, fp8::GemmKind::kFprop, true),
              at::mm(dq(qx.rowwise), dq(qw.rowwise).t()) + bias.to(at::kDouble)));
  CHECK(close(fp8::rowwise_gemm(qdy.rowwise, qw.columnwise, at::Tensor(), at::kFloat, fp8::GemmKind::kDgrad, false),
              at::mm(dq(qdy.rowwise), dq(qw.columnwise).t())));
  CHECK(close(fp8::rowwise_gemm(qdy.columnwise, qx.columnwise, at::Tensor(), at::kFloat, fp8::GemmKind::kWgrad, false),
              at::mm(dq(qdy.columnwise), dq(qx.columnwise).t())));
  // A row-scaled operand meets only a row-scaled partner, and is never transposed.
  Fp8Operand per_tensor = qw.rowwise;
  per_tensor.scale_layout = ScaleLayout::kTensor;
  per_tensor.scale_inv = at::ones({}, at::kFloat);
  REQUIRE_THROWS_WITH(fp8::rowwise_gemm(qx.rowwise, per_tensor, at::Tensor(), at::kFloat, fp8::GemmKind::kFprop, false),
                      FP8T_CONTAINS("row-scaled partner"));
  REQUIRE_THROWS_WITH(fp8::transposed(qx.rowwise), FP8T_CONTAINS("cannot be transposed"));
}

TEST_CASE("rowwise scaling: the recipe's casts, layouts, statistics and rules", "[fp8]") {
  torch::manual_seed(7);
  Slots s = make_slots();
  CHECK(s.scaling->slot_format(s.grad) == fp8::Format::kE4M3);  // E4M3 everywhere, gradients too
  const at::Tensor x = torch::randn({16, 32});
  CastOptions both;
  both.columnwise = true;
  const Fp8Tensor q = s.scaling->quantize(s.input, CastSource::tensor(x), both);
  require_matches_reference(q.rowwise, x);
  require_matches_reference(q.columnwise, x.t());
  // A gradient source gives both layouts and dbias.
  at::Tensor dbias;
  CastOptions grad;
  grad.rowwise = false;
  grad.dbias = &dbias;
  const Fp8Tensor g = s.scaling->quantize(s.grad, CastSource::tensor(x), grad);
  REQUIRE(g.rowwise.defined());
  REQUIRE(g.columnwise.defined());
  REQUIRE(at::allclose(dbias, x.sum(0)));
  // Statistics on log steps: the row-scale range and the amax of the last measured cast.
  s.scaling->set_collect_stats(true);
  s.scaling->quantize(s.weight, CastSource::tensor(x * 4), CastOptions{});
  const auto stats = s.scaling->read_stats();
  REQUIRE(stats.size() == 3);
  CHECK(stats[s.weight].amax == (x * 4).abs().max().item<float>());
  REQUIRE(stats[s.weight].max_block_scale.has_value());
  CHECK(*stats[s.weight].max_block_scale == (1.0f / q.rowwise.scale_inv).max().item<float>() / 4.0f);
  CHECK_FALSE(stats[s.input].min_block_scale.has_value());  // not measured in this interval
  // The rules the rewrite and ZeRO-3 ask: no transposed weight codes, no FP8 gather, dims of 16.
  CHECK_FALSE(s.scaling->transposes_weight_codes());
  CHECK_FALSE(s.scaling->weight_parts().fp8_gather);
  CHECK(s.scaling->unsupported_linear(64, 48).empty());
  CHECK_THAT(s.scaling->unsupported_linear(100, 64), FP8T_CONTAINS("not multiples of 16"));
  CastOptions given_scale;
  given_scale.scale = at::ones({}, at::kFloat);
  given_scale.record = false;
  REQUIRE_THROWS_WITH(s.scaling->quantize(s.input, CastSource::tensor(x), given_scale),
                      FP8T_CONTAINS("no per-tensor scale"));
}

TEST_CASE("rowwise scaling: an Fp8Linear's forward and backward are the GEMMs of the row-wise casts (CPU)", "[fp8]") {
  torch::manual_seed(11);
  fp8t::model::Linear src(64, 48, true);
  fp8::Recipe r;
  r.kind = fp8::RecipeKind::kRowwise;
  auto scaling = std::make_shared<RowwiseScaling>(r);
  auto layer = std::make_shared<fp8::Fp8Linear>(src, "fc", scaling);
  scaling->finalize(at::kCPU);
  const at::Tensor x = (torch::randn({20, 64}) * at::pow(2.0, torch::randint(-5, 5, {20, 1}))).requires_grad_();
  const at::Tensor dy = torch::randn({20, 48});
  const at::Tensor y = layer->forward(x);
  y.backward(dy);
  const Fp8Tensor qx = fp8::rowwise_quantize_cpu(x.detach(), true, true);
  const Fp8Tensor qw = fp8::rowwise_quantize_cpu(src.weight.detach(), true, true);
  const Fp8Tensor qdy = fp8::rowwise_quantize_cpu(dy, true, true);
  const auto dq = [](const Fp8Operand& op) { return fp8::rowwise_dequantize(op); };
  // The layer runs the same FP32 GEMMs on the same dequantized operands: equal up to the order of
  // the FP32 sums (1e-5 relative).
  CHECK(at::allclose(y, at::mm(dq(qx.rowwise), dq(qw.rowwise).t()) + src.bias, 1e-5, 1e-6));
  CHECK(at::allclose(x.grad(), at::mm(dq(qdy.rowwise), dq(qw.columnwise).t()), 1e-5, 1e-6));
  CHECK(at::allclose(src.weight.grad(), at::mm(dq(qdy.columnwise), dq(qx.columnwise).t()), 1e-5, 1e-6));
  CHECK(at::allclose(src.bias.grad(), dy.sum(0), 1e-5, 1e-6));
}

TEST_CASE("rowwise scaling: a tiny GPT trains on the CPU emulation and resumes bit for bit", "[fp8]") {
  test::TempDir tmp("rowwise_scaling_resume");
  const auto straight = tiny_rowwise_run(tmp.path().string(), "straight");
  REQUIRE(train::run_training(straight, {})["status"] == "completed");
  const auto split = tiny_rowwise_run(tmp.path().string(), "split");
  train::TrainOptions first;
  first.stop_after = 4;
  REQUIRE(train::run_training(split, first)["status"] == "stopped");
  REQUIRE(checkpoint::load_checkpoint(tmp.path() / "split" / "checkpoint.pt").meta.at("fp8_recipe") == "rowwise");
  train::TrainOptions resume;
  resume.resume = true;
  REQUIRE(train::run_training(split, resume)["status"] == "completed");
  const auto losses = [](const std::filesystem::path& metrics) {
    std::vector<std::string> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const auto row = nlohmann::json::parse(line);
      if (row.contains("loss")) out.push_back(row["loss"].dump());
    }
    return out;
  };
  const auto a = losses(tmp.path() / "straight" / "metrics.jsonl");
  const auto b = losses(tmp.path() / "split" / "metrics.jsonl");
  REQUIRE(a.size() == 10);
  REQUIRE(std::stod(a.back()) < std::stod(a.front()));  // it trains
  REQUIRE(a == b);
}
