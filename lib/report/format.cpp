#include "lib/report/format.h"

#include <algorithm>  // std::max
#include <cmath>      // std::isfinite
#include <cstdio>     // std::snprintf

#include <nlohmann/json.hpp>  // nlohmann::json

namespace fp8t::report {
namespace {

std::string shown(const Cell& c) { return c.missing() ? "-" : c.text; }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

std::string one_line(std::string s) {
  for (char& ch : s) {
    if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
  }
  return s;
}

}  // namespace

std::string to_text(const Table& table) {
  std::vector<size_t> width(table.columns.size());
  for (size_t i = 0; i < width.size(); ++i) {
    width[i] = table.columns[i].key.size();
    for (const auto& row : table.rows) width[i] = std::max(width[i], shown(row[i]).size());
  }
  auto line = [&](auto cell_text) {
    std::string out;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string s = cell_text(i);
      if (i + 1 < width.size()) s.resize(width[i] + 2, ' ');
      out += s;
    }
    return out + "\n";
  };
  std::string out = line([&](size_t i) { return table.columns[i].key; });
  out += line([&](size_t i) { return std::string(width[i], '-'); });
  for (const auto& row : table.rows) out += line([&](size_t i) { return shown(row[i]); });
  return out;
}

std::string to_markdown(const Table& table) {
  auto esc = [](const std::string& s) { return replace_all(one_line(s), "|", "\\|"); };
  std::string head = "|", rule = "|";
  for (const auto& c : table.columns) {
    head.append(" ").append(esc(c.key)).append(" |");  // appended: GCC 12 warns falsely on " " + a temporary
    rule += c.config || c.key == "run" || c.key == "status" ? " --- |" : " ---: |";
  }
  std::string out = head + "\n" + rule + "\n";
  for (const auto& row : table.rows) {
    out += "|";
    for (const auto& cell : row) out.append(" ").append(esc(shown(cell))).append(" |");
    out += "\n";
  }
  return out;
}

std::string to_tsv(const Table& table) {
  std::string out;
  for (size_t i = 0; i < table.columns.size(); ++i) out.append(i ? "\t" : "").append(one_line(table.columns[i].key));
  out += "\n";
  for (const auto& row : table.rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      std::string s = row[i].text;
      if (row[i].number && !table.columns[i].config) {
        char buf[40];
        std::snprintf(buf, sizeof(buf), "%.17g", *row[i].number);
        s = buf;
      }
      out.append(i ? "\t" : "").append(one_line(s));
    }
    out += "\n";
  }
  return out;
}

std::string to_json(const Table& table) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t r = 0; r < table.rows.size(); ++r) {
    nlohmann::json o = nlohmann::json::object();
    for (size_t i = 0; i < table.columns.size(); ++i) {
      const Cell& c = table.rows[r][i];
      const std::string& key = table.columns[i].key;
      if (c.number && !table.columns[i].config) {
        o[key] = std::isfinite(*c.number) ? nlohmann::json(*c.number) : nlohmann::json(nullptr);
      } else {
        o[key] = c.missing() ? nlohmann::json(nullptr) : nlohmann::json(c.text);
      }
      if (c.number && !c.slot.empty()) o[key] = {{"slot", c.slot}, {"fraction", *c.number}};
    }
    o["path"] = table.runs[r]->path.string();
    o["problems"] = table.runs[r]->problems;
    rows.push_back(std::move(o));
  }
  return rows.dump(2) + "\n";
}

}  // namespace fp8t::report
