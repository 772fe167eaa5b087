#include "lib/config/parse.h"

#include <yaml-cpp/yaml.h>  // YAML::Node, YAML::Load

#include <algorithm>  // std::find_if
#include <cmath>      // std::isfinite
#include <set>        // std::set

#include "lib/config/text.h"  // lower, trim, split_commas, join, quoted, read_number, looks_like_float
#include "lib/util/error.h"   // FP8T_THROW, ExitCode

namespace fp8t {
namespace config {

namespace {

int node_line(const YAML::Node& n) { return n.Mark().is_null() ? -1 : n.Mark().line; }

}  // namespace

void fail(const std::string& message) { FP8T_THROW(ExitCode::kBadInput, message); }

// ---- scalar parsers (throw ValueError) ----------------------------------------------------

bool parse_bool(const Field& f, const std::string& text) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "1") return true;
  if (t == "false" || t == "no" || t == "0") return false;
  throw ValueError("expected " + f.expected() + ", got " + quoted(text));
}

int64_t parse_int(const Field& f, const std::string& text) {
  int64_t v = 0;
  const std::errc ec = read_number(text, /*allow_minus=*/true, v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && (v < f.int_min || v > f.int_max))) {
    throw ValueError("got " + text + ", which is out of range (expected an integer between " +
                     std::to_string(f.int_min) + " and " + std::to_string(f.int_max) + ")");
  }
  if (ec != std::errc()) {
    throw ValueError("expected " + f.expected() + ", got " + quoted(text) +
                     (looks_like_float(text) ? " (write a whole number, without fraction or exponent)" : ""));
  }
  return v;
}

uint64_t parse_uint(const Field& f, const std::string& text) {
  uint64_t v = 0;
  const std::errc ec = read_number(text, /*allow_minus=*/false, v);
  if (ec == std::errc::result_out_of_range) {
    throw ValueError("got " + text + ", which is out of range (expected " + f.expected() + " below 2^64)");
  }
  if (ec != std::errc()) {
    const bool negative = !text.empty() && text[0] == '-';
    throw ValueError("expected " + f.expected() + ", got " + quoted(text) +
                     (negative                 ? " (must not be negative)"
                      : looks_like_float(text) ? " (write a whole number, without fraction or exponent)"
                                               : ""));
  }
  return v;
}

double parse_double(const Field& f, const std::string& text) {
  double v = 0;
  if (read_number(text, /*allow_minus=*/true, v) != std::errc() || !std::isfinite(v)) {
    throw ValueError("expected " + f.expected() + ", got " + quoted(text));
  }
  return v;
}

std::string parse_enum(const Field& f, const std::string& text) {
  const std::string t = lower(text);
  for (const auto& c : f.choices) {
    if (lower(c) == t) return c;
  }
  for (const auto& r : f.rejected) {
    if (lower(r.value) == t) {
      throw ValueError(quoted(text) + " is not supported: " + r.reason + "; expected " + f.expected());
    }
  }
  throw ValueError("expected " + f.expected() + ", got " + quoted(text));
}

GemmFlags parse_gemm_flags_text(const Field& f, const std::string& text) {
  const auto parts = split_commas(text);
  if (parts.size() != kGemmNames.size()) {
    throw ValueError("expected " + f.expected() + ", got " + quoted(text));
  }
  GemmFlags out{};
  for (size_t i = 0; i < parts.size(); ++i) {
    try {
      out[i] = parse_bool(f, parts[i]);
    } catch (const ValueError&) {
      throw ValueError(std::string(kGemmNames[i]) + ": expected a boolean (true/false, yes/no, 1/0), got " +
                       quoted(parts[i]) + " in " + quoted(text));
    }
  }
  return out;
}

std::vector<std::string> parse_list_text(const Field& f, const std::string& text) {
  if (trim(text).empty()) return {};
  auto parts = split_commas(text);
  for (const auto& p : parts) {
    if (p.empty()) throw ValueError("empty entry in " + quoted(text) + "; expected " + f.expected());
  }
  return parts;
}

// ---- values of any field type -------------------------------------------------------------

Value parse_text(const Field& f, const std::string& text, const Value& current) {
  switch (f.type) {
    case FieldType::kBool: return parse_bool(f, text);
    case FieldType::kInt: return parse_int(f, text);
    case FieldType::kUInt: return parse_uint(f, text);
    case FieldType::kFloat: return parse_double(f, text);
    case FieldType::kString: return text;
    case FieldType::kEnum: return parse_enum(f, text);
    case FieldType::kGemmFlags:
    case FieldType::kStringList: {
      const std::string t = trim(text);
      if (!t.empty() && (t[0] == '{' || t[0] == '[')) {
        YAML::Node node;
        try {
          node = YAML::Load(t);
        } catch (const YAML::Exception& e) {
          throw ValueError("cannot read " + quoted(text) + " (" + e.msg + "); expected " + f.expected());
        }
        return parse_node(f, node, current);
      }
      if (f.type == FieldType::kGemmFlags) return parse_gemm_flags_text(f, text);
      return parse_list_text(f, text);
    }
  }
  throw ValueError("unsupported field type");
}

Value parse_node(const Field& f, const YAML::Node& n, const Value& current) {
  if (!n.IsDefined() || n.IsNull()) {
    if (f.type == FieldType::kString) return std::string();
    if (f.type == FieldType::kStringList) return std::vector<std::string>();
    throw ValueError("missing value; expected " + f.expected());
  }
  if (f.type == FieldType::kGemmFlags && n.IsMap()) {
    GemmFlags out = std::get<GemmFlags>(current);
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      const auto pos = std::find_if(kGemmNames.begin(), kGemmNames.end(), [&](const char* g) { return k == g; });
      if (pos == kGemmNames.end()) {
        throw ValueError("unknown entry " + quoted(k) + "; expected fprop, dgrad, wgrad", node_line(it->first));
      }
      if (!seen.insert(k).second) throw ValueError("duplicate entry " + quoted(k), node_line(it->first));
      if (!it->second.IsScalar()) {
        throw ValueError(k + ": expected a boolean (true/false, yes/no, 1/0)", node_line(it->second));
      }
      try {
        out[pos - kGemmNames.begin()] = parse_bool(f, it->second.Scalar());
      } catch (const ValueError&) {
        throw ValueError(k + ": expected a boolean (true/false, yes/no, 1/0), got " + quoted(it->second.Scalar()),
                         node_line(it->second));
      }
    }
    return out;
  }
  if (f.type == FieldType::kGemmFlags && n.IsSequence()) {
    if (n.size() != kGemmNames.size()) {
      throw ValueError("expected three booleans (fprop, dgrad, wgrad), got a list of " + std::to_string(n.size()));
    }
    GemmFlags out{};
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node e = n[i];
      if (!e.IsScalar()) throw ValueError(std::string(kGemmNames[i]) + ": expected a boolean", node_line(e));
      try {
        out[i] = parse_bool(f, e.Scalar());
      } catch (const ValueError&) {
        throw ValueError(std::string(kGemmNames[i]) + ": expected a boolean (true/false, yes/no, 1/0), got " +
                         quoted(e.Scalar()), node_line(e));
      }
    }
    return out;
  }
  if (f.type == FieldType::kStringList && n.IsSequence()) {
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node e = n[i];
      if (!e.IsScalar()) throw ValueError("entry " + std::to_string(i) + ": expected a string", node_line(e));
      out.push_back(e.Scalar());
    }
    return out;
  }
  if (!n.IsScalar()) {
    throw ValueError("expected " + f.expected() + ", got a " + (n.IsSequence() ? "list" : "mapping"));
  }
  return parse_text(f, n.Scalar(), current);
}

// ---- printing -----------------------------------------------------------------------------

std::string format_value(const Field& f, const Value& v) {
  switch (f.type) {
    case FieldType::kBool: return std::get<bool>(v) ? "true" : "false";
    case FieldType::kInt: return std::to_string(std::get<int64_t>(v));
    case FieldType::kUInt: return std::to_string(std::get<uint64_t>(v));
    case FieldType::kFloat: return format_float(std::get<double>(v));
    case FieldType::kString: return yaml_quote(std::get<std::string>(v));
    case FieldType::kEnum: return std::get<std::string>(v);
    case FieldType::kGemmFlags: {
      const auto& g = std::get<GemmFlags>(v);
      std::vector<std::string> parts;
      for (size_t i = 0; i < g.size(); ++i) parts.push_back(std::string(kGemmNames[i]) + ": " + (g[i] ? "true" : "false"));
      return "{" + join(parts, ", ") + "}";
    }
    case FieldType::kStringList: {
      std::vector<std::string> parts;
      for (const auto& s : std::get<std::vector<std::string>>(v)) parts.push_back(yaml_quote(s));
      return "[" + join(parts, ", ") + "]";
    }
  }
  return "?";
}

}  // namespace config
}  // namespace fp8t
