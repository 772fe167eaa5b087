// The end-of-run FP8 line (lib/train/progress.h: fp8_summary_line) from summary.json's "fp8".
#include <nlohmann/json.hpp>

#include "lib/train/progress.h"
#include "tests/catch.h"

using fp8t::train::fp8_summary_line;

namespace {

nlohmann::json delayed_cpu_run() {
  return {{"recipe", "delayed"},          {"format", "HYBRID"},        {"emulated", true},
          {"scaled_tensors", 24},         {"linears", 9},              {"fp8_linears", 8},
          {"fp8_gemm_flops_share", 0.75}, {"kept_linears", {"lm_head"}}, {"scale_min", 1.0},
          {"scale_max", 2896.3}};
}

}  // namespace

TEST_CASE("fp8_summary_line says what FP8 did", "[train]") {
  CHECK(fp8_summary_line(nullptr).empty());  // not an fp8 run: no line
  CHECK(fp8_summary_line(delayed_cpu_run()) ==
        "fp8 (delayed scaling, HYBRID: E4M3 forward, E5M2 gradients; emulated on the CPU): 8 of 9 Linear layers "
        "in FP8 (75.0% of the Linear GEMM FLOPs; kept: lm_head), 24 scaled tensors, scales 1 to 2.9e+03; "
        "saturation and underflow per tensor: add --fp8-stats");
}

TEST_CASE("fp8_summary_line names the worst slots of --fp8-stats", "[train]") {
  nlohmann::json fp8 = delayed_cpu_run();
  fp8["format"] = "E4M3";
  fp8["emulated"] = false;
  fp8.erase("scale_min");  // block scaling has no per-tensor scales
  fp8.erase("scale_max");
  fp8["worst"] = {{"most_saturated", {{{"slot", "h0.mlp.c_fc:input"}, {"fraction", 0.0}}}},
                  {"most_underflow", {{{"slot", "h1.attn.c_attn:grad_output"}, {"fraction", 0.888}}}}};
  CHECK(fp8_summary_line(fp8) ==
        "fp8 (delayed scaling, E4M3 everywhere): 8 of 9 Linear layers in FP8 (75.0% of the Linear GEMM FLOPs; "
        "kept: lm_head), 24 scaled tensors; most saturated none, most underflow h1.attn.c_attn:grad_output 88.8%");
}

TEST_CASE("worst_fp8_slots keeps each slot's largest fraction and the first log step that showed it", "[train]") {
  fp8t::train::Progress p;
  auto row = [](const char* slot, double saturated, double underflow) {
    return nlohmann::json{{"slot", slot}, {"saturated", saturated}, {"underflow", underflow}};
  };
  // Step 1: a delayed run's first casts use scale 1, so its gradients underflow there.
  p.record_fp8_stats({row("h0.a:grad_output", 0.0, 0.9), row("h0.b:input", 0.002, 0.1)}, 1);
  p.record_fp8_stats({row("h0.a:grad_output", 0.0, 0.001), row("h0.b:input", 0.003, 0.1)}, 10);
  p.record_fp8_stats({row("h0.a:grad_output", 0.0, 0.0), row("h0.b:input", 0.001, 0.95)}, 20);
  const nlohmann::json w = fp8t::train::worst_fp8_slots(p.worst_fp8);
  const nlohmann::json& under = w["most_underflow"];
  REQUIRE(under.size() == 2);
  CHECK(under[0] == nlohmann::json{{"slot", "h0.b:input"}, {"fraction", 0.95}, {"step", 20}});
  CHECK(under[1] == nlohmann::json{{"slot", "h0.a:grad_output"}, {"fraction", 0.9}, {"step", 1}});
  // b's saturation grew at step 10 and fell after; a never saturated: its entry is its first step's.
  CHECK(w["most_saturated"][0] == nlohmann::json{{"slot", "h0.b:input"}, {"fraction", 0.003}, {"step", 10}});
  CHECK(w["most_saturated"][1] == nlohmann::json{{"slot", "h0.a:grad_output"}, {"fraction", 0.0}, {"step", 1}});

  nlohmann::json fp8 = delayed_cpu_run();
  fp8["worst"] = w;
  CHECK_THAT(fp8_summary_line(fp8),
             FP8T_CONTAINS("; most saturated h0.b:input 0.3% (step 10), most underflow h0.b:input 95% (step 20)"));
}
