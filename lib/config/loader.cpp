// YAML reading with line numbers and command-line overrides, both through the field table.
#include "lib/config/loader.h"

#include <yaml-cpp/yaml.h>  // YAML::Load, YAML::Node

#include <algorithm>   // std::find
#include <filesystem>  // std::filesystem::is_directory, exists
#include <fstream>     // std::ifstream
#include <set>         // std::set
#include <sstream>     // std::ostringstream

#include "lib/config/fields.h"    // fields(), find_field, parse_node, parse_text
#include "lib/config/key_scan.h"  // check_known_keys, unknown_*_message
#include "lib/config/parse.h"     // fail
#include "lib/config/text.h"      // join, quoted
#include "lib/config/validate.h"  // validate

namespace fp8t {
namespace config {
namespace {

// "file:12" for a node (1-based line), or just "file" when the node has no position.
std::string at(const std::string& source, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  return m.is_null() ? source : source + ":" + std::to_string(m.line + 1);
}

std::string kind_of(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  if (n.IsScalar()) return "the scalar " + quoted(n.Scalar());
  return "nothing";
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& top : top_level_names()) {
    const Field* f = find_field(top);
    if (f == nullptr) out.push_back(top);
  }
  return out;
}

// Reads one key's value node into the config and records where it came from (the key's line).
void set_from_node(const Field& f, const YAML::Node& key_node, const YAML::Node& value,
                   const std::string& source, LoadedConfig& out) {
  const std::string origin = at(source, key_node);
  try {
    f.set(out.config, parse_node(f, value, f.get(out.config)));
  } catch (const ValueError& e) {
    const std::string where = e.line() >= 0 ? source + ":" + std::to_string(e.line() + 1) : origin;
    fail(f.key + " (" + where + "): " + e.what());
  }
  out.sources.set(f.key, origin);
}

std::string scalar_key(const YAML::Node& key_node, const std::string& source, const std::string& parent) {
  if (!key_node.IsScalar()) {
    fail(at(source, key_node) + ": expected a plain key name" + (parent.empty() ? "" : " in " + parent) +
         ", got " + kind_of(key_node));
  }
  return key_node.Scalar();
}

}  // namespace

std::string ConfigSources::origin(const std::string& key) const {
  const auto it = origins_.find(key);
  return it == origins_.end() ? "default" : it->second;
}

void apply_yaml(const std::string& yaml_text, const std::string& source_name, LoadedConfig& out) {
  check_known_keys(yaml_text, source_name);  // streaming: a file of unknown keys stops at its first one
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    fail(source_name + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    fail(source_name + ": cannot read YAML: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) return;  // empty document: nothing to change
  const std::vector<std::string> sections = section_names();
  if (!root.IsMap()) {
    fail(at(source_name, root) + ": the top level must be a mapping with the sections " + join(sections) +
         " and the key precision, got " + kind_of(root));
  }
  std::set<std::string> seen_top;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string name = scalar_key(it->first, source_name, "");
    if (!seen_top.insert(name).second) fail(at(source_name, it->first) + ": duplicate key " + quoted(name));
    if (const Field* f = find_field(name); f != nullptr) {  // a top-level key (precision)
      set_from_node(*f, it->first, it->second, source_name, out);
      continue;
    }
    if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
      fail(unknown_section_message(at(source_name, it->first), name));
    }
    const YAML::Node body = it->second;  // a copy: it->second lives in a temporary proxy
    if (body.IsNull()) continue;  // `model:` with nothing under it
    if (!body.IsMap()) {
      fail(name + " (" + at(source_name, it->first) + "): expected a mapping of " + name + ".* keys, got " +
           kind_of(body));
    }
    std::set<std::string> seen;
    for (auto kv = body.begin(); kv != body.end(); ++kv) {
      const std::string key = name + "." + scalar_key(kv->first, source_name, name);
      if (!seen.insert(key).second) fail(at(source_name, kv->first) + ": duplicate key " + quoted(key));
      const Field* f = find_field(key);
      if (f == nullptr) fail(unknown_key_message(at(source_name, kv->first), key));
      set_from_node(*f, kv->first, kv->second, source_name, out);
    }
  }
}

void apply_overrides(const std::vector<Override>& overrides, LoadedConfig& out) {
  for (const auto& o : overrides) {
    const std::string origin = o.origin.empty() ? "--set" : o.origin;
    if (o.key.empty()) fail(origin + ": missing key; expected KEY=VALUE, got " + quoted("=" + o.value));
    const Field* f = find_field(o.key);
    if (f == nullptr) {
      fail(origin + ": unknown key " + quoted(o.key) + did_you_mean(o.key) +
           "; fp8train --help lists every key");
    }
    try {
      f->set(out.config, parse_text(*f, o.value, f->get(out.config)));
    } catch (const ValueError& e) {
      fail(f->key + " (" + origin + "): " + e.what());
    }
    out.sources.set(f->key, origin);
  }
}

LoadedConfig load_from_string(const std::string& yaml_text, const std::string& source_name,
                              const std::vector<Override>& overrides, ConfigUse use) {
  LoadedConfig out;
  apply_yaml(yaml_text, source_name, out);
  apply_overrides(overrides, out);
  validate(out.config, out.sources, use);
  return out;
}

LoadedConfig load(const std::string& yaml_path, const std::vector<Override>& overrides, ConfigUse use) {
  if (yaml_path.empty()) return load_from_string("", "<defaults>", overrides, use);
  std::error_code ec;
  if (!std::filesystem::exists(yaml_path, ec)) fail("config file not found: " + yaml_path);
  if (std::filesystem::is_directory(yaml_path, ec)) fail("config file " + yaml_path + " is a directory");
  std::ifstream in(yaml_path, std::ios::binary);
  if (!in) fail("cannot open config file " + yaml_path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("cannot read config file " + yaml_path);
  return load_from_string(text.str(), yaml_path, overrides, use);
}

}  // namespace config
}  // namespace fp8t
