// lib/train/precision_chart.*: the chart of fp32, bf16, fp16 and fp8 runs, read from the live
// session (FP8 layers, skipped layers, the LM head, embeddings, optimizer state).
#include "lib/train/precision_chart.h"

#include <algorithm>  // std::find
#include <array>      // std::array

#include "lib/optim/optimizer.h"  // AdamW::state_dict
#include "lib/step/session.h"     // Session
#include "lib/util/error.h"       // fp8t::Error
#include "tests/catch.h"

using namespace fp8t;
using train::ChartGroup;
using train::ChartRow;

namespace {

// Two blocks of d_model 32: every Linear has dimensions that are multiples of 16, so the FP8
// rewrite converts all of them except the ones fp8.skip_layers names.
ExperimentConfig tiny(Precision precision) {
  ExperimentConfig c;
  c.precision = precision;
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  return c;
}

const std::vector<std::string> kBlockLinears = {
    "h0.attn.c_attn", "h0.attn.c_proj", "h0.mlp.c_fc", "h0.mlp.c_proj",
    "h1.attn.c_attn", "h1.attn.c_proj", "h1.mlp.c_fc", "h1.mlp.c_proj"};

const ChartGroup& group(const ChartRow& row, const std::string& precision, const std::string& detail_part) {
  for (const ChartGroup& g : row.groups) {
    if (g.precision == precision && g.detail.find(detail_part) != std::string::npos) return g;
  }
  FAIL("row '" << row.item << "' has no " << precision << " group mentioning '" << detail_part << "'");
  return row.groups.front();
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The rows every precision shares here: FP32 weights that are their own master weights, FP32
// gradients, FP32 + FP32 AdamW state, one process.
void check_fp32_state(const train::PrecisionChart& chart, size_t params) {
  REQUIRE(chart.row("weights").summary() == "FP32");
  REQUIRE(chart.row("master_weights").summary() == "none");
  REQUIRE(chart.row("weight_gradients").summary() == "FP32");
  REQUIRE(chart.row("optimizer_states").summary() == "FP32 + FP32");
  REQUIRE(chart.row("communication").summary() == "none");
  size_t counted = 0;
  for (const ChartGroup& g : chart.row("weights").groups) counted += g.names.size();
  REQUIRE(counted == params);  // every parameter once (the tied LM head shares wte)
  const ChartGroup emb = group(chart.row("weights"), "FP32", "embeddings");
  REQUIRE(has(emb.names, "wte.weight"));
  REQUIRE(has(emb.names, "wpe.weight"));
}

}  // namespace

TEST_CASE("precision chart: fp32, bf16 and fp16 run every GEMM in the autocast dtype", "[train]") {
  // GENERATE over an index, not over pairs: Catch would print a pair<Precision, ...> through
  // LibTorch's operator<< for std::pair, which has no overload for the enum.
  const int which = GENERATE(0, 1, 2);
  const Precision precision = std::array{Precision::kFp32, Precision::kBf16, Precision::kFp16}[which];
  const char* dtype = std::array{"FP32", "BF16", "FP16"}[which];
  INFO("precision " << dtype);
  step::Session session(tiny(precision), at::Device(at::kCPU));
  const train::PrecisionChart chart = train::precision_chart(session);
  const ChartRow& compute = chart.row("compute_gemm");
  REQUIRE(compute.summary() == dtype);
  const ChartGroup linears = group(compute, dtype, "Linear");
  REQUIRE(linears.names.size() == kBlockLinears.size() + 1);
  for (const auto& n : kBlockLinears) REQUIRE(has(linears.names, n));
  REQUIRE(has(linears.names, "lm_head"));
  REQUIRE(group(compute, dtype, "attention").names == std::vector<std::string>{"h0.attn", "h1.attn"});
  check_fp32_state(chart, session.parameters().size());
  // Lower precisions: the weights reach the GEMMs as autocast copies.
  if (precision != Precision::kFp32) group(chart.row("weights"), "FP32", std::string("GEMMs ") + dtype + " copies");
  const ChartRow& ls = chart.row("loss_scaling");
  if (precision == Precision::kFp16) {
    REQUIRE(ls.summary() == "dynamic");
    REQUIRE(ls.groups.front().detail.find("scale 65536 (init 65536), x2 after 2000 finite steps, x0.5") !=
            std::string::npos);
  } else {
    REQUIRE(ls.summary() == "none");
  }
}

TEST_CASE("precision chart: fp8 names the FP8 layers, the skipped layers and the LM head", "[train]") {
  ExperimentConfig cfg = tiny(Precision::kFp8);
  cfg.fp8.skip_layers = {"lm_head", "h1.mlp.c_fc"};
  cfg.fp8.override_linear_precision.wgrad = true;
  step::Session session(cfg, at::Device(at::kCPU));
  const train::PrecisionChart chart = train::precision_chart(session);
  const ChartRow& compute = chart.row("compute_gemm");
  REQUIRE(compute.summary() == "FP8 / FP32");  // the CPU emulation keeps the rest in FP32

  const ChartGroup fp8 = group(compute, "FP8", "fprop E4M3 x E4M3, dgrad E5M2 x E4M3, wgrad FP32 (override)");
  REQUIRE(fp8.detail.find("emulated") != std::string::npos);
  REQUIRE(fp8.names.size() == 7);
  REQUIRE_FALSE(has(fp8.names, "h1.mlp.c_fc"));
  const ChartGroup kept = group(compute, "FP32", "kept out of FP8 (listed in fp8.skip_layers)");
  REQUIRE(kept.names == std::vector<std::string>{"h1.mlp.c_fc", "lm_head"});
  REQUIRE(group(compute, "FP32", "attention").names.size() == 2);

  check_fp32_state(chart, session.parameters().size());
  REQUIRE(group(chart.row("weights"), "FP32", "E4M3 copies, cast once per optimizer step").names.size() == 7);
  REQUIRE(chart.row("loss_scaling").summary() == "none");

  // After prepare_training the optimizer rows come from the live AdamW state: unchanged.
  session.prepare_training(nullptr);
  const train::PrecisionChart live = train::precision_chart(session);
  REQUIRE(live.to_json() == chart.to_json());
}

TEST_CASE("precision chart: train.moments_dtype bf16 shows BF16 moments, before and after the optimizer exists",
          "[train]") {
  ExperimentConfig cfg = tiny(Precision::kBf16);
  cfg.train.moments_dtype = MomentsDtype::kBf16;
  step::Session session(cfg, at::Device(at::kCPU));
  const train::PrecisionChart chart = train::precision_chart(session);
  REQUIRE(chart.row("optimizer_states").summary() == "BF16 + BF16");
  REQUIRE(chart.row("optimizer_states").groups.front().detail.find("train.moments_dtype bf16") != std::string::npos);
  REQUIRE(chart.row("master_weights").summary() == "none");  // the weights stay FP32 masters
  session.prepare_training(nullptr);  // the live AdamW state (Session hands the key to AdamW)
  REQUIRE(session.optimizer().state_dict().at("wte.weight.exp_avg").scalar_type() == at::kBFloat16);
  REQUIRE(train::precision_chart(session).to_json() == chart.to_json());
}

TEST_CASE("precision chart: HYBRID vs E4M3 formats come from the scaling slots", "[train]") {
  ExperimentConfig cfg = tiny(Precision::kFp8);
  cfg.fp8.fp8_format = fp8::RecipeFormat::kE4M3;
  step::Session session(cfg, at::Device(at::kCPU));
  const train::PrecisionChart chart = train::precision_chart(session);
  const ChartRow& compute = chart.row("compute_gemm");
  REQUIRE(group(compute, "FP8", "fprop E4M3 x E4M3, dgrad E4M3 x E4M3, wgrad E4M3 x E4M3").names.size() == 8);
}

TEST_CASE("precision chart: text, JSON and a planned data-parallel job", "[train]") {
  step::Session session(tiny(Precision::kBf16), at::Device(at::kCPU));
  const train::PrecisionChart chart = train::precision_chart(session, /*planned_world_size=*/4);
  REQUIRE(chart.row("communication").summary() == "FP32");
  REQUIRE(chart.row("communication").groups.front().detail.find("over 4 ranks") != std::string::npos);

  const std::string text = chart.to_string();
  for (const char* item : {"compute (GEMM)", "communication", "weights", "master weights", "weight gradients",
                           "optimizer states", "loss scaling"}) {
    INFO(item);
    REQUIRE(text.find(item) != std::string::npos);
  }
  REQUIRE(text.find("h*.attn.c_attn x2") != std::string::npos);
  REQUIRE(text.find("(all 29)") != std::string::npos);  // one group: counted, not listed

  const nlohmann::json j = chart.to_json();
  REQUIRE(j["precision"] == "bf16");
  REQUIRE(j["compute_gemm"]["precision"] == "BF16");
  REQUIRE(j["compute_gemm"]["groups"][0]["count"] == 9);
  REQUIRE(j["optimizer_states"]["precision"] == "FP32 + FP32");
  REQUIRE_THROWS_AS(chart.row("no such row"), Error);
}

TEST_CASE("precision chart: names compress over block indices", "[train]") {
  REQUIRE(train::compress_names({"h0.attn.c_attn", "h1.attn.c_attn", "lm_head", "h1.mlp.c_fc"}) ==
          "h*.attn.c_attn x2, lm_head, h*.mlp.c_fc");
  REQUIRE(train::compress_names({"blocks.0.ln_1", "blocks.1.ln_1", "blocks.1.ln_2"}) == "blocks.*.ln_1 x2, blocks.*.ln_2");
  REQUIRE(train::compress_names({"a", "b", "c"}, 2) == "a, b, and 1 more");
  REQUIRE(train::compress_names({}).empty());
}

TEST_CASE("precision chart: fp8.attention puts every attention in the FP8 group", "[train]") {
  ExperimentConfig cfg = tiny(Precision::kFp8);
  cfg.fp8.attention = true;
  step::Session session(cfg, at::Device(at::kCPU));
  const train::PrecisionChart chart = train::precision_chart(session);
  const ChartRow& compute = chart.row("compute_gemm");
  const ChartGroup attn = group(compute, "FP8", "FP8 attention");
  REQUIRE(attn.names == std::vector<std::string>{"h0.attn", "h1.attn"});
  REQUIRE(attn.detail.find("emulated on the CPU") != std::string::npos);
  for (const ChartGroup& g : compute.groups) REQUIRE(g.detail.find("scaled_dot_product_attention") == std::string::npos);
}
