// to_yaml and describe_keys, both generated from the field table.
#include "lib/config/print.h"

#include <algorithm>  // std::max
#include <sstream>    // std::ostringstream

#include "lib/config/fields.h"              // fields(), format_value, top_level_names
#include "lib/config/fp8_recipe_fields.h"   // recipe_fields_in_effect, recipe_fields_without_effect

namespace fp8t {
namespace config {

std::string to_yaml(const ExperimentConfig& config) {
  std::ostringstream os;
  std::string section = "\x01";  // none yet
  for (const auto& f : fields()) {
    const std::string s = f.section();
    if (s.empty()) {
      os << f.key << ": " << format_value(f, f.get(config)) << "\n";
      section = s;
      continue;
    }
    if (s != section) {
      os << s << ":\n";
      section = s;
    }
    os << "  " << f.name() << ": " << format_value(f, f.get(config)) << "\n";
  }
  return os.str();
}

std::string recipe_note(const ExperimentConfig& config) {
  if (config.precision != Precision::kFp8) return "";
  auto list = [](const std::vector<std::string>& keys) {
    std::string s;
    for (const std::string& k : keys) s += (s.empty() ? "" : ", ") + k;
    return s.empty() ? std::string("none") : s;
  };
  const fp8::RecipeKind kind = config.fp8.kind;
  return std::string("# fp8.recipe ") + fp8::to_string(kind) + ": recipe keys in effect: " +
         list(fp8::recipe_fields_in_effect(kind)) + "\n# ignored under " + fp8::to_string(kind) + ": " +
         list(fp8::recipe_fields_without_effect(kind)) + "\n";
}

std::string describe_keys() {
  const ExperimentConfig defaults;
  struct Row {
    std::string key, type, def, help;
  };
  std::vector<Row> rows;
  size_t wk = 3, wt = 4, wd = 7;
  for (const auto& f : fields()) {
    Row r{f.key, f.type_name(), format_value(f, f.get(defaults)), f.help};
    if (f.range) r.type.append(" ").append(f.range->describe());  // not " " + ...: a GCC 12 false -Wstringop-overflow
    wk = std::max(wk, r.key.size());
    wt = std::max(wt, r.type.size());
    wd = std::max(wd, r.def.size());
    rows.push_back(std::move(r));
  }
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w - s.size() + 2, ' '); };
  std::ostringstream os;
  os << pad("KEY", wk) << pad("TYPE", wt) << pad("DEFAULT", wd) << "DESCRIPTION\n";
  for (const auto& r : rows) os << pad(r.key, wk) << pad(r.type, wt) << pad(r.def, wd) << r.help << "\n";
  return os.str();
}

}  // namespace config
}  // namespace fp8t
