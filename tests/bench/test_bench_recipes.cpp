// lib/bench/bench.cpp under --recipes: rows named fp8:<recipe>, tokens/s against fp8:delayed and
// bf16 in the table and the JSON (hand-made results: no model, no training, no GPU).
#include <sstream>  // std::istringstream
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/bench/bench.h"
#include "tests/catch.h"

using fp8t::bench::BenchOptions;
using fp8t::bench::BenchResult;

namespace {

BenchResult result(const std::string& precision, const std::string& recipe, double tokens_per_s) {
  BenchResult r;
  r.precision = precision;
  r.recipe = recipe;
  r.parameters = 1000000;
  r.tokens_per_step = 256;
  r.tokens_per_s = tokens_per_s;
  r.median_step_ms = 256.0 / tokens_per_s * 1e3;
  r.peak_memory_bytes = 1LL << 30;
  r.final_loss = 3.0;
  return r;
}

// The table line that starts with `label` followed by a space.
std::string row_of(const std::string& table, const std::string& label) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label + " ", 0) == 0) return line;
  }
  return "";
}

}  // namespace

TEST_CASE("bench --recipes: one row per recipe, against fp8:delayed and bf16", "[bench]") {
  fp8t::ExperimentConfig cfg;
  BenchOptions options;
  options.recipes = {fp8t::fp8::RecipeKind::kDelayed, fp8t::fp8::RecipeKind::kCurrent};
  const std::vector<BenchResult> results = {result("bf16", "", 1000.0), result("fp8", "delayed", 1600.0),
                                            result("fp8", "current", 1500.0)};
  REQUIRE(results[2].label() == "fp8:current");
  const std::string table = fp8t::bench::format_bench_table(cfg, options, results);
  INFO(table);
  CHECK(row_of(table, "precision").find("vs delayed") != std::string::npos);
  // current: 1500 / 1000 = 1.500x bf16, 1500 / 1600 = 0.938x delayed.
  const std::string current = row_of(table, "fp8:current");
  CHECK(current.find("1.500x") != std::string::npos);
  CHECK(current.find("0.938x") != std::string::npos);
  CHECK(row_of(table, "fp8:delayed").find("1.000x") != std::string::npos);

  const auto json = fp8t::bench::bench_to_json(cfg, options, results);
  CHECK(json.at("results")[2].at("recipe") == "current");
  CHECK(json.at("recipe_over_delayed").at("current").get<double>() == Approx(1500.0 / 1600.0));
  CHECK(json.at("recipe_over_bf16").at("delayed").get<double>() == Approx(1.6));
  CHECK_FALSE(json.at("results")[0].contains("recipe"));  // bf16 has no recipe
}

TEST_CASE("bench without --recipes: the fp8 row keeps its name and the table its columns", "[bench]") {
  fp8t::ExperimentConfig cfg;
  const std::vector<BenchResult> results = {result("bf16", "", 1000.0), result("fp8", "", 1600.0)};
  const std::string table = fp8t::bench::format_bench_table(cfg, BenchOptions{}, results);
  CHECK(row_of(table, "fp8").find("1.600x") != std::string::npos);
  CHECK(table.find("vs delayed") == std::string::npos);
  CHECK_FALSE(fp8t::bench::bench_to_json(cfg, BenchOptions{}, results).contains("recipe_over_delayed"));
}
