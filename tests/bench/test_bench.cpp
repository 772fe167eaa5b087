// lib/bench/bench.cpp's report: the table and the JSON of a hand-made result set (no model, no
// training, no GPU).
#include "lib/bench/bench.h"

#include <sstream>  // std::istringstream
#include <string>   // std::string, std::getline
#include <vector>   // std::vector

#include "tests/catch.h"

using fp8t::ExperimentConfig;
using fp8t::ZeroStage;
using fp8t::bench::BenchOptions;
using fp8t::bench::BenchResult;
using fp8t::bench::KernelTime;

namespace {

ExperimentConfig bench_config() {
  ExperimentConfig cfg;
  cfg.model.n_layer = 2;
  cfg.model.d_model = 64;
  cfg.model.n_head = 4;
  cfg.model.seq_len = 32;
  cfg.model.vocab_size = 256;
  cfg.train.micro_batch_size = 4;
  return cfg;
}

BenchOptions bench_options() {
  BenchOptions o;
  o.steps = 10;
  o.warmup = 3;
  o.micro_batches = 2;
  o.profile_steps = 5;
  return o;
}

BenchResult bf16_result() {
  BenchResult r;
  r.precision = "bf16";
  r.parameters = 1234567;
  r.tokens_per_step = 256;
  r.median_step_ms = 20.0;
  r.min_step_ms = 19.5;
  r.max_step_ms = 21.0;
  r.tokens_per_s = 12800;
  r.tflops = 1.26;
  r.peak_memory_bytes = 2LL << 30;
  r.final_loss = 3.14159;
  return r;
}

BenchResult fp8_result() {
  BenchResult r = bf16_result();
  r.precision = "fp8";
  r.median_step_ms = 16.0;
  r.tokens_per_s = 16000;
  r.tflops = 1.58;
  r.peak_memory_bytes = 3LL << 29;  // 1.5 GiB
  r.final_loss = 3.2;
  r.skipped_steps = 3;
  r.fp8_rewrite = "4 Linear layers -> Fp8Linear";
  r.phase_ms = {{"forward", 4.0}, {"backward", 8.5}};
  r.phase_peak_bytes = {{"forward", 1LL << 30}, {"backward", 3LL << 29}};
  r.kernels = {KernelTime{"void k1<int>(float*, int)", 3.0, 2}, KernelTime{"(anonymous namespace)::k2(int)", 1.0, 1}};
  r.profiled_device_ms_per_step = 4.0;
  r.profiled_gpu = true;
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool has_line(const std::vector<std::string>& lines, const std::string& line) {
  for (const auto& l : lines) {
    if (l == line) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("bench table: header, one row per precision with the ratio to bf16", "[bench]") {
  const auto lines = lines_of(fp8t::bench::format_bench_table(bench_config(), bench_options(),
                                                              {bf16_result(), fp8_result()}));
  REQUIRE(lines.size() >= 6);
  CHECK(lines[0] == "model: 1.2M params (2 layers, d_model 64, 4 heads, seq 32, vocab 256)");
  CHECK(lines[1] == "step:  2 x 4 x 32 = 256 tokens; median of 10 steps after 3 warm-up");
  CHECK(lines[2].empty());
  CHECK(lines[3] == "precision      step ms      tokens/s   TFLOP/s      peak GiB   vs bf16        loss  skipped");
  CHECK(lines[4] == "bf16             20.00         12800       1.3          2.00    1.000x      3.1416        0");
  CHECK(lines[5] == "fp8              16.00         16000       1.6          1.50    1.250x      3.2000        3");
}

TEST_CASE("bench table: phases and kernel profile sections, '-' without a bf16 row", "[bench]") {
  const auto lines = lines_of(fp8t::bench::format_bench_table(bench_config(), bench_options(), {fp8_result()}));
  CHECK(lines[4] == "fp8              16.00         16000       1.6          1.50         -      3.2000        3");
  CHECK(has_line(lines, "fp8 phases (median ms, synchronized after each): forward 4.00 backward 8.50"));
  CHECK(has_line(lines, "fp8 phases' memory peaks (GiB, the largest over the steps): forward 1.00 backward 1.50"));
  CHECK(has_line(lines, "fp8 GPU kernels, per step (5 profiled steps; 4.00 ms in total):"));
  CHECK(has_line(lines, "        ms       %   calls  name"));
  // Return type and argument list dropped; '(anonymous namespace)' is part of the name.
  CHECK(has_line(lines, "     3.000    75.0       2  k1<int>"));
  CHECK(has_line(lines, "     1.000    25.0       1  (anonymous namespace)::k2"));
}

TEST_CASE("bench JSON: settings, one row per precision, and fp8 over bf16", "[bench]") {
  const auto j = fp8t::bench::bench_to_json(bench_config(), bench_options(), {bf16_result(), fp8_result()});
  CHECK(j.at("model").at("parameters") == 1234567);
  CHECK(j.at("model").at("n_layer") == 2);
  CHECK(j.at("micro_batch_size") == 4);
  CHECK(j.at("micro_batches_per_step") == 2);
  CHECK(j.at("timed_steps") == 10);
  CHECK(j.at("warmup_steps") == 3);
  CHECK(j.at("world_size") == 1);
  CHECK(j.at("fp8train").is_string());
  CHECK(j.contains("versions"));
  CHECK(j.at("fp8_over_bf16").get<double>() == Approx(1.25).epsilon(1e-12));  // 16000 / 12800
  const auto& rows = j.at("results");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].at("precision") == "bf16");
  CHECK(rows[0].at("median_step_ms") == 20.0);
  CHECK(rows[0].at("min_step_ms") == 19.5);
  CHECK(rows[0].at("max_step_ms") == 21.0);
  CHECK(rows[0].at("model_tflops") == 1.26);
  CHECK(rows[0].at("peak_memory_bytes") == (2LL << 30));
  CHECK_FALSE(rows[0].contains("fp8_rewrite"));
  CHECK_FALSE(rows[0].contains("phase_ms"));
  CHECK_FALSE(rows[0].contains("profile"));
  CHECK(rows[0].at("skipped_steps") == 0);
  CHECK(rows[1].at("skipped_steps") == 3);
  CHECK(rows[1].at("fp8_rewrite") == "4 Linear layers -> Fp8Linear");
  CHECK(rows[1].at("phase_ms").at("backward") == 8.5);
  CHECK(rows[1].at("phase_peak_bytes").at("backward") == (3LL << 29));
  const auto& profile = rows[1].at("profile");
  CHECK(profile.at("steps") == 5);
  CHECK(profile.at("device_ms_per_step") == 4.0);
  REQUIRE(profile.at("kernels").size() == 2);
  CHECK(profile.at("kernels")[0].at("name") == "void k1<int>(float*, int)");  // the full name in the JSON
  CHECK(profile.at("kernels")[0].at("calls_per_step") == 2.0);
}

TEST_CASE("bench JSON: no ratio without both bf16 and fp8", "[bench]") {
  CHECK_FALSE(fp8t::bench::bench_to_json(bench_config(), bench_options(), {fp8_result()}).contains("fp8_over_bf16"));
  CHECK_FALSE(fp8t::bench::bench_to_json(bench_config(), bench_options(), {bf16_result()}).contains("fp8_over_bf16"));
}

TEST_CASE("bench table and JSON: the memory estimate per rank, bytes per parameter by category", "[bench]") {
  ExperimentConfig cfg = bench_config();
  cfg.dist.zero = ZeroStage::kOptimizer;
  BenchResult r = fp8_result();
  r.memory.parameters = 1e9;
  r.memory.world_size = 2;
  r.memory.shard_ranks = 2;
  r.memory.optimizer_bytes_per_param = 4;  // 8 / 2 ranks
  r.memory.grad_bytes_per_param = 2;       // 4 / 2 ranks
  r.memory.fp8_bytes_per_param = 1.5;
  r.memory.gradient_bucket_bytes = 0.25 * 1073741824.0;
  r.memory.state_bytes = 11.75 * 1073741824.0;
  r.memory.activation_bytes = 0.25 * 1073741824.0;
  const auto lines = lines_of(fp8t::bench::format_bench_table(cfg, bench_options(), {r}));
  CHECK(has_line(lines, "memory per rank, estimated (bytes/parameter; lib/plan/resources.h, a lower bound), against "
                        "the measured peak:"));
  CHECK(has_line(lines, "precision   weights  grads  optimizer  wt copies   total  state GiB  transient GiB  "
                        "activations GiB  estimate GiB  peak GiB   peak/estimate"));
  // 11.75 + 0.25 = 12 GiB estimated; the measured 1.5 GiB is 0.125 of it.
  CHECK(has_line(lines, "fp8            4.00   2.00       4.00       1.50   11.50      11.75           0.00             "
                        "0.25         12.00      1.50            0.12"));
  CHECK(has_line(lines, "dist.zero 1: the AdamW moments and the FP32 gradients are sharded over 2 ranks (ZeRO-1); "
                        "state GiB includes the full gradient buckets in use at once: 0.25 GiB"));
  const auto j = fp8t::bench::bench_to_json(cfg, bench_options(), {r});
  CHECK(j.at("zero") == 1);
  const auto& per_param = j.at("results")[0].at("memory_estimate").at("bytes_per_parameter");
  CHECK(per_param.at("optimizer") == 4.0);
  CHECK(per_param.at("gradients") == 2.0);
  CHECK(per_param.at("weight_copies") == 1.5);
  CHECK(per_param.at("total") == 11.5);
  CHECK(j.at("results")[0].at("memory_estimate").at("gradient_bucket_bytes") == 0.25 * 1073741824.0);
  CHECK(j.at("results")[0].at("memory_estimate").at("total_bytes") == 12.0 * 1073741824.0);
  // ZeRO-3: the two units' gradients and the gathered units.
  cfg.dist.zero = ZeroStage::kFull;
  r.memory.gathered_weight_bytes = 0.5 * 1073741824.0;
  r.memory.gathered_units = 2;
  const auto zero3 = lines_of(fp8t::bench::format_bench_table(cfg, bench_options(), {r}));
  CHECK(has_line(zero3, "dist.zero 3: weights, gradients and AdamW moments sharded over 2 ranks (ZeRO-3); state GiB "
                        "includes the full gradients of 2 units (0.25 GiB); transient the gathered weights of 2 units "
                        "(0.50 GiB)"));
  CHECK(has_line(zero3, "fp8            4.00   2.00       4.00       1.50   11.50      11.75           0.50             "
                        "0.25         12.50      1.50            0.12"));
  // A mixture of experts' transient buffers go in the same column: the columns add up to the estimate.
  r.memory.moe_transient_bytes = 1.0 * 1073741824.0;
  CHECK(has_line(lines_of(fp8t::bench::format_bench_table(cfg, bench_options(), {r})),
                 "fp8            4.00   2.00       4.00       1.50   11.50      11.75           1.50             "
                 "0.25         13.50      1.50            0.11"));
  CHECK(fp8t::bench::bench_to_json(cfg, bench_options(), {r})["results"][0]["memory_estimate"]["moe_transient_bytes"] ==
        1073741824.0);
}

TEST_CASE("bench table and JSON: whether each row replayed a CUDA graph", "[bench]") {
  BenchResult bf16 = bf16_result(), fp8 = fp8_result();
  bf16.cuda_graph = fp8.cuda_graph = true;
  CHECK(has_line(lines_of(fp8t::bench::format_bench_table(bench_config(), bench_options(), {bf16, fp8})),
                 "CUDA graphs: replayed in every row"));
  CHECK(has_line(lines_of(fp8t::bench::format_bench_table(bench_config(), bench_options(), {fp8})),
                 "CUDA graphs: replayed"));
  fp8.cuda_graph = false;
  fp8.cuda_graph_off_reason = "fp8.stats is on";
  CHECK(has_line(lines_of(fp8t::bench::format_bench_table(bench_config(), bench_options(), {bf16, fp8})),
                 "CUDA graphs: bf16 replayed; fp8 eager: fp8.stats is on"));
  bf16.cuda_graph = false;
  bf16.cuda_graph_off_reason = "fp8.stats is on";
  CHECK(has_line(lines_of(fp8t::bench::format_bench_table(bench_config(), bench_options(), {bf16, fp8})),
                 "CUDA graphs: eager in every row: fp8.stats is on"));
  const auto j = fp8t::bench::bench_to_json(bench_config(), bench_options(), {bf16_result(), fp8});
  CHECK(j.at("results")[0].at("cuda_graph") == false);
  CHECK_FALSE(j.at("results")[0].contains("cuda_graph_off_reason"));
  CHECK(j.at("results")[1].at("cuda_graph_off_reason") == "fp8.stats is on");
}
