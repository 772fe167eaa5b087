#include "lib/run/metrics.h"

#include <cmath>    // NAN
#include <fstream>  // std::ifstream, std::ofstream
#include <limits>   // std::numeric_limits

#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::test::TempDir;
using fp8t::run::MetricsWriter;
using nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("MetricsWriter appends one flushed JSON line per record, also after reopening",
          "[run]") {
  TempDir tmp("metrics");
  const auto path = tmp / "metrics.jsonl";
  {
    MetricsWriter w(path);
    w.write({{"step", 1}, {"loss", 4.5}});
    // Flushed per line: visible to a reader while the writer is still open.
    REQUIRE(lines_of(path) == std::vector<std::string>{R"({"loss":4.5,"step":1})"});
    w.write({{"step", 2}, {"loss", std::numeric_limits<double>::quiet_NaN()}});
  }
  {
    MetricsWriter w(path);  // resume: append
    w.write({{"step", 3}, {"eval_loss", 3.25}, {"kind", "eval"}});
  }
  const auto lines = lines_of(path);
  REQUIRE(lines.size() == 3);
  REQUIRE(json::parse(lines[0])["step"] == 1);
  REQUIRE(json::parse(lines[1])["loss"].is_null());  // NaN has no JSON spelling
  REQUIRE(json::parse(lines[2])["eval_loss"] == 3.25);

  MetricsWriter w(path);
  REQUIRE_THROWS_AS(w.write(json::array({1, 2})), fp8t::Error);
  REQUIRE(lines_of(path).size() == 3);
}

TEST_CASE("MetricsWriter names a file it cannot open", "[run]") {
  TempDir tmp("metrics_open");
  try {
    MetricsWriter w(tmp / "no" / "such" / "metrics.jsonl");
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    // An I/O failure (the run folder exists by then), which the trainer turns into exit 3.
    REQUIRE(e.code() == fp8t::ExitCode::kFailure);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("metrics.jsonl"));
  }
}

TEST_CASE("truncate_metrics_after drops records past the checkpoint and torn lines",
          "[run]") {
  TempDir tmp("metrics_trunc");
  const auto path = tmp / "metrics.jsonl";
  std::ofstream(path) << R"({"step":10,"loss":3})" "\n"
                      << R"({"kind":"config"})" "\n"
                      << R"({"step":20,"loss":2})" "\n"
                      << R"({"step":30,"loss":1})" "\n"
                      << R"({"step":40,"lo)";  // torn by a crash mid-write
  REQUIRE(fp8t::run::truncate_metrics_after(path, 20) == 2);
  REQUIRE(lines_of(path) == std::vector<std::string>{R"({"step":10,"loss":3})",
                                                     R"({"kind":"config"})",
                                                     R"({"step":20,"loss":2})"});
  REQUIRE(fp8t::run::truncate_metrics_after(path, 20) == 0);
  REQUIRE(fp8t::run::truncate_metrics_after(tmp / "absent.jsonl", 5) == 0);
  REQUIRE_FALSE(std::filesystem::exists(tmp / "absent.jsonl"));
  REQUIRE(TempDir::list(tmp.path()) == std::vector<std::string>{"metrics.jsonl"});
}

TEST_CASE("write_summary writes pretty JSON atomically", "[run]") {
  TempDir tmp("summary");
  const auto path = tmp / "summary.json";
  const json summary = {{"final_loss", 1.25}, {"steps", 300}, {"tokens_per_sec", 45210.5}};
  fp8t::run::write_summary(path, summary);
  std::ifstream in(path);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  REQUIRE(json::parse(text) == summary);
  REQUIRE(text.back() == '\n');
  REQUIRE_THAT(text, FP8T_CONTAINS("\n  \"steps\": 300"));
  fp8t::run::write_summary(path, {{"steps", 1}});
  REQUIRE(TempDir::list(tmp.path()) == std::vector<std::string>{"summary.json"});
}
