// The first unknown key of an experiment file, found while the YAML streams past, before any
// node tree is built. A file of 50 MB of misspelt keys is refused at its first one in
// milliseconds instead of after building the whole tree (tens of seconds, gigabytes); the
// loader (loader.h) runs the scan first and builds the tree only for files that pass it.
#pragma once

#include <string>  // std::string

namespace fp8t {
namespace config {

// Throws fp8t::Error (kBadInput) with the loader's own message for the first unknown section
// or key of `yaml_text` ("file:LINE: unknown key ..."). YAML errors are left to the loader.
void check_known_keys(const std::string& yaml_text, const std::string& source_name);

// The loader's messages, shared with the scan: `where` is "file:LINE".
std::string unknown_section_message(const std::string& where, const std::string& name);
std::string unknown_key_message(const std::string& where, const std::string& key);

// The section names (run, model, data, train, dist, fp8): the top-level names that are not keys.
bool is_section_name(const std::string& name);

}  // namespace config
}  // namespace fp8t
