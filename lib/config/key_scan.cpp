#include "lib/config/key_scan.h"

#include <yaml-cpp/eventhandler.h>  // YAML::EventHandler
#include <yaml-cpp/exceptions.h>    // YAML::Exception
#include <yaml-cpp/mark.h>          // YAML::Mark
#include <yaml-cpp/parser.h>        // YAML::Parser

#include <sstream>  // std::istringstream
#include <vector>   // std::vector

#include "lib/config/fields.h"  // find_field, top_level_names, did_you_mean
#include "lib/config/parse.h"   // fail
#include "lib/config/text.h"    // join, quoted

namespace fp8t {
namespace config {
namespace {

// Follows the event stream with a stack of open containers, checking the keys of the top-level
// mapping and of each section's mapping; deeper levels (values) are the loader's business.
class KeyScanner : public YAML::EventHandler {
 public:
  explicit KeyScanner(std::string source) : source_(std::move(source)) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override { throw Done(); }  // the loader reads one document
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m, nullptr); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { node(m, nullptr); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string& value) override {
    node(m, &value);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(m, /*map=*/false);
  }
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(m, /*map=*/true);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapEnd() override { close(); }

  struct Done {};  // the first document ended: stop

 private:
  struct Frame {
    bool map = false;
    bool want_key = true;
    int level = 0;        // 1: the top-level mapping, 2: a section's mapping, 0: not checked
    std::string section;  // level 2: the section's name
    std::string key;      // the key whose value comes next (maps)
  };

  void check_key(const Frame& f, const YAML::Mark& m, const std::string& name) const {
    const std::string where = source_ + ":" + std::to_string(m.line + 1);
    if (f.level == 1 && find_field(name) == nullptr && !is_section_name(name)) {
      fail(unknown_section_message(where, name));
    }
    if (f.level == 2 && find_field(f.section + "." + name) == nullptr) {
      fail(unknown_key_message(where, f.section + "." + name));
    }
  }
  // A scalar (value != nullptr), null or alias node.
  void node(const YAML::Mark& m, const std::string* value) {
    if (stack_.empty()) return;
    Frame& f = stack_.back();
    if (!f.map) return;
    if (f.want_key) {
      if (value != nullptr) check_key(f, m, *value);
      f.key = value != nullptr ? *value : "";
    }
    f.want_key = !f.want_key;
  }
  void open(const YAML::Mark& m, bool map) {
    Frame child;
    child.map = map;
    if (stack_.empty()) {
      child.level = map ? 1 : 0;
    } else {
      Frame& parent = stack_.back();
      const bool section_body = parent.map && !parent.want_key && parent.level == 1 && is_section_name(parent.key);
      child.level = map && section_body ? 2 : 0;
      child.section = parent.key;
      node(m, nullptr);  // the container takes the parent's key or value slot (a container key is not checked)
    }
    stack_.push_back(child);
  }
  void close() {
    if (!stack_.empty()) stack_.pop_back();
  }

  std::string source_;
  std::vector<Frame> stack_;
};

}  // namespace

bool is_section_name(const std::string& name) {
  for (const std::string& top : top_level_names()) {
    if (top == name && find_field(top) == nullptr) return true;
  }
  return false;
}

std::string unknown_section_message(const std::string& where, const std::string& name) {
  return where + ": unknown section " + quoted(name) + did_you_mean(name) + "; expected one of " +
         join(top_level_names());
}

std::string unknown_key_message(const std::string& where, const std::string& key) {
  return where + ": unknown key " + quoted(key) + did_you_mean(key);
}

void check_known_keys(const std::string& yaml_text, const std::string& source_name) {
  std::istringstream in(yaml_text);
  KeyScanner scanner(source_name);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(scanner);
  } catch (const KeyScanner::Done&) {
  } catch (const YAML::Exception&) {
    // Malformed YAML: the loader's own parse reports it with its line.
  }
}

}  // namespace config
}  // namespace fp8t
