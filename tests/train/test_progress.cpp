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
