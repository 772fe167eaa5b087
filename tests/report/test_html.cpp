#include "lib/report/html.h"

#include "lib/report/assets.h"              // assets::chart_js
#include "tests/catch.h"
#include "tests/report/report_test_util.h"  // write_run
#include "tests/temp_dir.h"                 // TempDir

using namespace fp8t::report;
using fp8t::test::TempDir;

TEST_CASE("the embedded assets are the files of the repository", "[report]") {
  REQUIRE(assets::chart_js().rfind("/*!\n * Chart.js v3.9.1", 0) == 0);
  REQUIRE(assets::chart_js().size() > 100000);
  REQUIRE_THAT(std::string(assets::report_js()), FP8T_CONTAINS("report-data"));
  REQUIRE_THAT(std::string(assets::report_css()), FP8T_CONTAINS("table.runs"));
}

TEST_CASE("to_html writes one page with the table, the inline data and no external reference", "[report]") {
  TempDir tmp("report");
  fp8t::test::write_run(tmp / "a", "a<script>", 0, "0.001");
  fp8t::test::write_run(tmp / "b", "b", 1, "0.001", "failed");
  std::vector<RunFolder> runs = {read_run_folder(tmp / "a"), read_run_folder(tmp / "b"),
                                 read_run_folder(tmp / "not-here")};
  const Table table = build_table(runs);
  const std::string page = to_html(runs, table, "generated today");
  REQUIRE(page.rfind("<!DOCTYPE html>", 0) == 0);
  REQUIRE_THAT(page, FP8T_CONTAINS("a&lt;script&gt;"));              // escaped in the table
  REQUIRE_THAT(page, FP8T_CONTAINS("\"name\":\"a\\u003cscript>\""));   // JSON-escaped in the data
  REQUIRE_THAT(page, FP8T_CONTAINS("<tr class=\"bad\">"));             // the failed run is marked
  REQUIRE_THAT(page, FP8T_CONTAINS("does not exist"));                 // the bad input is listed
  REQUIRE(page.find(" src=") == std::string::npos);
  REQUIRE(page.find(" href=") == std::string::npos);
}

TEST_CASE("chart_data_json escapes < and writes NaN as null", "[report]") {
  RunFolder run;
  run.name = "x</script>";
  run.loss.step = {1, 2};
  run.loss.value = {1.0, std::nan("")};
  const std::string json = chart_data_json({&run});
  REQUIRE(json.find('<') == std::string::npos);
  const auto parsed = nlohmann::json::parse(json);
  REQUIRE(parsed["runs"][0]["name"] == "x</script>");
  REQUIRE(parsed["runs"][0]["loss"]["value"][1].is_null());
}
