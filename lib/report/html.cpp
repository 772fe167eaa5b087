#include "lib/report/html.h"

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/report/assets.h"  // assets::chart_js, report_js, report_css

namespace fp8t::report {
namespace {

nlohmann::json series_json(const Series& s) {
  nlohmann::json values = nlohmann::json::array();
  for (double v : s.value) values.push_back(v);  // NaN dumps as null
  return {{"step", s.step}, {"value", values}};
}

nlohmann::json fp8_json(const Fp8History& h) {
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& s : h.slots) {
    slots.push_back({{"slot", s.slot}, {"format", s.format}, {"amax", s.amax}, {"scale", s.scale},
                     {"saturated", s.saturated}, {"underflow", s.underflow}});
  }
  return {{"steps", h.steps}, {"slots", slots}};
}

std::string table_html(const Table& table) {
  std::string out = "<table class=\"runs\">\n<tr>";
  for (const auto& c : table.columns) {
    const bool text = c.config || c.key == "run" || c.key == "status" || c.key.rfind("most_", 0) == 0;
    out += "<th class=\"" + std::string(c.config ? "config text" : text ? "text" : "") + "\">" + html_escape(c.key) + "</th>";
  }
  out += "</tr>\n";
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const std::string& status = table.runs[r]->status;
    const char* cls = status == "completed" ? "" : status == "running" || status == "stopped" ? "running" : "bad";
    out += std::string("<tr class=\"") + cls + "\">";
    for (size_t i = 0; i < table.columns.size(); ++i) {
      const Cell& cell = table.rows[r][i];
      const Column& col = table.columns[i];
      const bool text = col.config || !cell.number || col.key.rfind("most_", 0) == 0;  // slot names read left
      std::string content = html_escape(cell.missing() ? "-" : cell.text);
      if (i == 0) content = "<span class=\"swatch\" data-run=\"" + std::to_string(r) + "\"></span>" + content;
      out += "<td class=\"" + std::string(col.config ? "config text" : text ? "text" : "") + "\">" + content + "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string problems_html(const std::vector<RunFolder>& runs) {
  std::string items;
  for (const auto& run : runs) {
    for (const auto& p : run.problems) items += "<li><b>" + html_escape(run.path.string()) + "</b>: " + html_escape(p) + "</li>\n";
  }
  return items.empty() ? "" : "<ul class=\"problems\">\n" + items + "</ul>\n";
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string chart_data_json(const std::vector<const RunFolder*>& runs) {
  nlohmann::json list = nlohmann::json::array();
  for (const RunFolder* run : runs) {
    list.push_back({{"name", run->name}, {"status", run->status}, {"loss", series_json(run->loss)},
                    {"val_loss", series_json(run->val_loss)}, {"lr", series_json(run->lr)},
                    {"grad_norm", series_json(run->grad_norm)}, {"tokens_per_s", series_json(run->tokens_per_s)},
                    {"fp8", fp8_json(run->fp8)}});
  }
  std::string text = nlohmann::json{{"runs", list}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // '<' occurs only inside JSON strings, where \u003c is the same character.
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string to_html(const std::vector<RunFolder>& runs, const Table& table, const std::string& generated) {
  std::string page;
  page += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  page += "<title>fp8train report (" + std::to_string(table.rows.size()) + " runs)</title>\n";
  page += "<style>\n" + std::string(assets::report_css()) + "</style>\n</head>\n<body>\n";
  page += "<h1>fp8train report</h1>\n<p class=\"meta\">" + std::to_string(table.rows.size()) + " runs; " +
          html_escape(generated) + ". Blue columns: the config keys that differ between the runs.</p>\n";
  page += problems_html(runs);
  page += "<h2>Runs</h2>\n<div class=\"scroll\">\n" + table_html(table) + "</div>\n";
  page += "<h2>Curves</h2>\n<div class=\"grid\" id=\"curves\"></div>\n";
  page += "<h2>FP8 statistics per slot</h2>\n<p class=\"note\">Runs trained with --fp8-stats: each FP8 tensor "
          "slot's scale, amax and fraction of saturated and underflowing elements on the log steps, one color "
          "scale per statistic for all runs. A bad layer shows as a row that stands out.</p>\n<div id=\"fp8\"></div>\n";
  page += "<script>\n" + std::string(assets::chart_js()) + "\n</script>\n";
  page += "<script type=\"application/json\" id=\"report-data\">" + chart_data_json(table.runs) + "</script>\n";
  page += "<script>\n" + std::string(assets::report_js()) + "</script>\n";
  page += "</body>\n</html>\n";
  return page;
}

}  // namespace fp8t::report
