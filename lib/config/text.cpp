#include "lib/config/text.h"

#include <algorithm>  // std::min, std::transform, std::swap
#include <cctype>     // std::isalnum, std::tolower
#include <charconv>   // std::to_chars
#include <set>        // std::set

namespace fp8t {
namespace config {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    const auto comma = s.find(',', start);
    out.push_back(trim(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

const char* number_start(const std::string& text, bool allow_minus) {
  const char* b = text.data();
  const char* e = b + text.size();
  const bool plus = b != e && *b == '+';
  if (plus) ++b;
  if (b == e || *b == '+' || (*b == '-' && (plus || !allow_minus))) return nullptr;
  return b;
}

bool looks_like_float(const std::string& text) {
  double d = 0;
  return read_number(text, /*allow_minus=*/true, d) == std::errc();
}

std::string shortest(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string format_float(double v) {
  std::string s = shortest(v);
  if (s.find_first_of(".eEin") == std::string::npos) s += ".0";
  return s;
}

std::string yaml_quote(const std::string& s) {
  static const std::set<std::string> ambiguous = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"};
  bool plain = !s.empty() && s[0] != '-' && !ambiguous.count(lower(s)) && !looks_like_float(s);
  for (const char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-')) plain = false;
  }
  if (plain) return s;
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace config
}  // namespace fp8t
