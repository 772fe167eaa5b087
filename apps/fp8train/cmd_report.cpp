// `fp8train report RUN_DIR...`: compare the runs of a sweep (lib/report/).
#include <spdlog/spdlog.h>  // spdlog::warn
#include <unistd.h>         // isatty, fileno

#include <chrono>    // std::chrono::system_clock
#include <ctime>     // std::strftime, std::localtime
#include <iostream>  // std::cout

#include "apps/fp8train/commands.h"  // add_report_command
#include "lib/report/format.h"       // to_text, to_markdown, to_tsv, to_json
#include "lib/report/html.h"         // to_html
#include "lib/report/run_folder.h"   // read_run_folder
#include "lib/report/table.h"        // build_table, sort_table
#include "lib/run/run_dir.h"         // run::write_text_atomic
#include "lib/util/error.h"          // FP8T_INPUT_CHECK

namespace fp8t {
namespace app {

namespace {

struct ReportArgs {
  std::vector<std::string> run_dirs;
  bool md = false, tsv = false, json = false, reverse = false;
  std::string html;
  std::string sort;
};

std::string now_text() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[64];
  std::strftime(buf, sizeof(buf), "generated %Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

// Reads every folder; a folder that is not a run is reported and counted, never fatal here.
std::vector<report::RunFolder> read_all(const std::vector<std::string>& dirs, int& not_runs) {
  std::vector<report::RunFolder> runs;
  not_runs = 0;
  for (const auto& d : dirs) {
    runs.push_back(report::read_run_folder(d));
    const report::RunFolder& run = runs.back();
    for (const auto& p : run.problems) {
      if (run.is_run) spdlog::warn("{}: {}", d, p);
      else spdlog::error("{}: {}; skipped", d, p);
    }
    if (!run.is_run) ++not_runs;
  }
  return runs;
}

void check_html_target(const std::string& html) {
  if (html.empty()) return;
  const std::filesystem::path parent = std::filesystem::absolute(html).parent_path();
  FP8T_INPUT_CHECK(std::filesystem::is_directory(parent), "--html ", html, ": the folder ", parent.string(),
                   " does not exist");
  FP8T_INPUT_CHECK(!std::filesystem::is_directory(html), "--html ", html, " is a folder; give a file name");
}

void run_report(const ReportArgs& a) {
  FP8T_INPUT_CHECK(a.md + a.tsv + a.json <= 1, "report: choose at most one of --md, --tsv, --json");
  check_html_target(a.html);
  int not_runs = 0;
  const std::vector<report::RunFolder> runs = read_all(a.run_dirs, not_runs);
  report::Table table = report::build_table(runs);
  if (!a.sort.empty()) report::sort_table(table, a.sort, a.reverse);
  if (!table.rows.empty()) {
    std::cout << (a.md ? report::to_markdown(table) : a.tsv ? report::to_tsv(table)
                  : a.json ? report::to_json(table) : report::to_text(table));
    std::cout.flush();
  }
  if (!a.html.empty()) {
    run::write_text_atomic(a.html, report::to_html(runs, table, now_text()));
    spdlog::info("wrote {} ({} runs)", a.html, table.rows.size());
  }
  FP8T_INPUT_CHECK(not_runs == 0, not_runs, " of ", runs.size(), " folder(s) are not run folders (see above)",
                   table.rows.empty() ? "; nothing to report" : "; the others are reported");
}

// `fp8train report --help`.
constexpr const char* kReportHelp =
    "compare run folders: a table of the config keys that differ and the outcomes (status, steps, losses,\n"
    "tokens/s, peak memory, worst FP8 slots), and with --html one self-contained page with the curves.\n"
    "Exit codes: 0 ok (failed, diverged or running runs included), 2 when an input is not a run folder\n"
    "(the other runs are still reported) or a flag is wrong.";

}  // namespace

void add_report_command(CLI::App& app) {
  auto [cmd, args] = add_args_command<ReportArgs>(app, "report", kReportHelp, run_report);
  cmd->add_option("run_dirs", args->run_dirs, "run folders (<out_dir>/<run_name>), e.g. runs/sweep-*")->required();
  cmd->add_flag("--md", args->md, "markdown table");
  cmd->add_flag("--tsv", args->tsv, "tab-separated values, numbers unrounded");
  cmd->add_flag("--json", args->json, "a JSON array, one object per run");
  cmd->add_option("--html", args->html, "also write one self-contained HTML page (table, curves, FP8 heatmaps)");
  cmd->add_option("--sort", args->sort, "sort by a column, e.g. best_val_loss, tokens_per_s or fp8.margin");
  cmd->add_flag("--reverse", args->reverse, "with --sort: largest first");
  cmd->footer("\nColumns, formats and the HTML page: docs/report.md. Example:\n"
              "  fp8train report runs/sweep-* --html sweep.html --sort best_val_loss");
}

}  // namespace app
}  // namespace fp8t
