#include "lib/report/table.h"

#include "lib/report/format.h"              // to_text, to_markdown, to_tsv, to_json
#include "lib/util/error.h"                 // fp8t::Error
#include "tests/catch.h"
#include "tests/report/report_test_util.h"  // write_run
#include "tests/temp_dir.h"                 // TempDir

using namespace fp8t::report;
using fp8t::test::TempDir;

namespace {

std::vector<RunFolder> three_runs(const TempDir& tmp) {
  fp8t::test::write_run(tmp / "a", "a", 0, "0.001", "completed", 2.5);
  fp8t::test::write_run(tmp / "b", "b", 1, "0.001", "diverged", 3.5);
  fp8t::test::write_run(tmp / "c", "c", 2, "0.002", "completed", 1.5);
  return {read_run_folder(tmp / "a"), read_run_folder(tmp / "b"), read_run_folder(tmp / "c")};
}

std::vector<std::string> keys(const Table& t) {
  std::vector<std::string> out;
  for (const auto& c : t.columns) out.push_back(c.key);
  return out;
}

}  // namespace

TEST_CASE("differing_keys lists exactly the config keys that differ, not the run name", "[report]") {
  TempDir tmp("report");
  auto runs = three_runs(tmp);
  REQUIRE(differing_keys(runs) == std::vector<std::string>{"fp8.margin", "train.lr"});
  runs[2].config.erase("train.lr");
  runs[2].config["fp8.margin"] = "0";
  runs[1].config["fp8.margin"] = "0";
  REQUIRE(differing_keys(runs) == std::vector<std::string>{"train.lr"});  // missing in one run counts
}

TEST_CASE("build_table has the differing keys, then the outcome columns; sort_table orders rows", "[report]") {
  TempDir tmp("report");
  const auto runs = three_runs(tmp);
  Table t = build_table(runs);
  std::vector<std::string> expected = {"run", "fp8.margin", "train.lr"};
  for (const auto& k : outcome_columns()) expected.push_back(k);
  REQUIRE(keys(t) == expected);
  REQUIRE(t.rows.size() == 3);
  REQUIRE(t.rows[1][3].text == "diverged");
  REQUIRE(t.rows[0][8].text == "45.2k");                   // tokens/s
  REQUIRE(t.rows[0][9].text == "100.0 MiB");               // peak memory
  REQUIRE(t.rows[0][10].text == "h0.fc1.input 12.5%");     // most saturated
  REQUIRE(t.rows[0][11].slot == "h0.fc2.grad");            // most underflow

  sort_table(t, "best_val_loss", false);
  REQUIRE(t.runs[0]->name == "c");
  REQUIRE(t.runs[2]->name == "b");
  sort_table(t, "best_val_loss", true);
  REQUIRE(t.runs[0]->name == "b");
  REQUIRE_THROWS_AS(sort_table(t, "bogus", false), fp8t::Error);
}

TEST_CASE("the table formats: text, markdown, tsv, json", "[report]") {
  TempDir tmp("report");
  const auto runs = three_runs(tmp);
  const Table t = build_table(runs);
  const std::string text = to_text(t);
  REQUIRE(text.rfind("run  fp8.margin  train.lr  status", 0) == 0);
  REQUIRE_THAT(text, FP8T_CONTAINS("diverged"));
  const std::string md = to_markdown(t);
  REQUIRE(md.rfind("| run | fp8.margin | train.lr | status |", 0) == 0);
  REQUIRE_THAT(md, FP8T_CONTAINS("| --- | --- | --- | --- | ---: |"));
  const std::string tsv = to_tsv(t);
  REQUIRE_THAT(tsv, FP8T_CONTAINS("\t45210\t104857600\t"));  // unrounded numbers
  const auto json = nlohmann::json::parse(to_json(t));
  REQUIRE(json.size() == 3);
  REQUIRE(json[1]["status"] == "diverged");
  REQUIRE(json[0]["fp8.margin"] == "0");
  REQUIRE(json[0]["tokens_per_s"].get<double>() == 45210.0);
  REQUIRE(json[0]["most_saturated"]["slot"] == "h0.fc1.input");
  REQUIRE(json[0]["path"] == (tmp / "a").string());
}

TEST_CASE("expert_balance: the last row's least balanced MoE layer; empty for a dense run", "[report]") {
  TempDir tmp("report");
  fp8t::test::write_run(tmp / "dense", "dense", 0, "0.001");
  fp8t::test::write_run(tmp / "moe", "moe", 1, "0.001");
  // Two log rows of a mixture of experts: the second one counts (h1.mlp: 96 / 64 = 1.5).
  fp8t::test::write_file(
      tmp / "moe" / "metrics.jsonl",
      "{\"step\":10,\"loss\":3.5,\"moe\":{\"h0.mlp\":{\"tokens_mean\":64.0,\"tokens_max\":200.0}}}\n"
      "{\"step\":20,\"loss\":2.5,\"moe\":{\"h0.mlp\":{\"tokens_mean\":64.0,\"tokens_max\":80.0},"
      "\"h1.mlp\":{\"tokens_mean\":64.0,\"tokens_max\":96.0}}}\n");
  const Table t = build_table({read_run_folder(tmp / "dense"), read_run_folder(tmp / "moe")});
  const size_t col = t.columns.size() - 1;
  REQUIRE(t.columns[col].key == "expert_balance");
  CHECK(t.rows[0][col].missing());
  CHECK(t.rows[1][col].text == "h1.mlp 1.50x");
  REQUIRE(t.rows[1][col].number.has_value());
  CHECK(*t.rows[1][col].number == 1.5);
}

TEST_CASE("the worst-slot columns name the first log step that showed the fraction", "[report]") {
  TempDir tmp("report");
  // A finished run whose summary carries the steps (summaries written before carry none: the
  // test above reads one without).
  fp8t::test::write_run(tmp / "a", "a", 0, "0.001");
  fp8t::test::write_file(tmp / "a" / "summary.json",
                         "{\"status\": \"completed\", \"run\": \"a\", \"steps\": 20, \"fp8_worst\": {\"most_saturated\": "
                         "[{\"slot\": \"h0.fc1.input\", \"fraction\": 0.125, \"step\": 10}], \"most_underflow\": "
                         "[{\"slot\": \"h0.fc2.grad\", \"fraction\": 0.5, \"step\": 1}]}}\n");
  // A run still writing its folder (no summary.json): the metrics history, whose rows at steps 10
  // and 20 hold the same fractions, so the first one counts.
  fp8t::test::write_run(tmp / "b", "b", 0, "0.001");
  std::filesystem::remove(tmp / "b" / "summary.json");
  const Table t = build_table({read_run_folder(tmp / "a"), read_run_folder(tmp / "b")});
  auto column = [&t](const std::string& key) {
    for (size_t i = 0; i < t.columns.size(); ++i) {
      if (t.columns[i].key == key) return i;
    }
    FAIL("no column " << key);
    return size_t{0};
  };
  const size_t sat = column("most_saturated"), under = column("most_underflow");
  CHECK(t.rows[0][sat].text == "h0.fc1.input 12.5% (step 10)");
  CHECK(t.rows[0][under].text == "h0.fc2.grad 50% (step 1)");
  CHECK(t.rows[1][sat].text == "h0.fc1.input 12.5% (step 10)");
  CHECK(t.rows[1][under].text == "h0.fc2.grad 50% (step 10)");
}
