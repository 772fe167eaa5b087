// The field table: every key of the experiment file, declared once as data.
//
// One Field per leaf of ExperimentConfig (key path, value type, help text, accessors, an
// optional range). The table drives YAML reading (loader.h), `--set key=value` and the
// dedicated flags (cli_flags.h), printing and the key listing (print.h), the range checks of
// validate.h, and config equality. Adding a key to experiment.h means adding one entry to the
// table in fields.cpp; nothing else needs per-key code.
//
// Sections (ExperimentConfig members): run (name, folder, seed, device, output), model, data,
// train (steps, optimizer, schedule, eval, checkpoints), dist (data-parallel jobs under
// torchrun: rendezvous/collective timeout, gradient bucket size), precision (a top-level
// scalar), fp8 (the recipe, lib/config/fp8_recipe.h).
#pragma once

#include <array>        // std::array
#include <cstdint>      // int64_t, uint64_t
#include <functional>   // std::function
#include <optional>     // std::optional
#include <stdexcept>    // std::runtime_error
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <variant>      // std::variant
#include <vector>       // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/config/text.h"        // format_float, yaml_quote (part of this API)

namespace YAML {
class Node;
}  // namespace YAML

namespace fp8t {
namespace config {

enum class FieldType {
  kBool,        // true/false, yes/no, 1/0 (any case)
  kInt,         // signed integer (int or int64_t member)
  kUInt,        // unsigned 64-bit integer
  kFloat,       // finite double
  kString,      // any text
  kEnum,        // one of Field::choices, case-insensitive in input, printed canonical
  kGemmFlags,   // one boolean per GEMM of a Linear: {fprop, dgrad, wgrad}
  kStringList,  // list of strings
};

// The three GEMMs of a Linear layer, in the order of a GemmFlags value and of "0,0,1".
using GemmFlags = std::array<bool, 3>;
inline constexpr std::array<const char*, 3> kGemmNames = {"fprop", "dgrad", "wgrad"};

// A field's value in neutral form; the alternative follows FieldType:
// kBool bool, kInt int64_t, kUInt uint64_t, kFloat double, kString and kEnum std::string
// (canonical spelling), kGemmFlags GemmFlags, kStringList std::vector<std::string>.
using Value = std::variant<bool, int64_t, uint64_t, double, std::string, GemmFlags,
                           std::vector<std::string>>;

// Allowed interval of a numeric field, e.g. ">= 1", "> 0", "in [0, 1)".
struct Range {
  std::optional<double> lo;
  std::optional<double> hi;
  bool lo_open = false;  // lo excluded
  bool hi_open = false;  // hi excluded

  bool contains(double v) const;
  std::string describe() const;
};

Range at_least(double lo);                     // [lo, inf)
Range greater_than(double lo);                 // (lo, inf)
Range half_open(double lo, double hi);         // [lo, hi)
Range open_interval(double lo, double hi);     // (lo, hi)

// An enum spelling that is recognised but refused, with the reason shown to the user.
struct Rejected {
  std::string value;
  std::string reason;
};

struct Field {
  std::string key;   // "model.n_layer", or "precision" for the top-level scalar
  FieldType type = FieldType::kString;
  std::string help;
  std::vector<std::string> choices;  // kEnum: canonical spellings
  std::vector<Rejected> rejected;    // kEnum: refused spellings (case-insensitive)
  std::optional<Range> range;        // numeric types: checked by validate()
  int64_t int_min = INT64_MIN;       // kInt: limits of the member's C++ type
  int64_t int_max = INT64_MAX;
  std::function<Value(const ExperimentConfig&)> get;
  std::function<void(ExperimentConfig&, const Value&)> set;

  // "model" for "model.n_layer"; empty for a top-level key.
  std::string section() const;
  // "n_layer" for "model.n_layer".
  std::string name() const;
  // Short type description for listings: "int", "float", "bool", "fp32|bf16|fp8", ...
  std::string type_name() const;
  // What a value must look like, for error messages: "an integer >= 1", "one of fp32, bf16, fp8".
  std::string expected() const;
};

// Every key, in the order they are printed (run, model, data, train, dist, precision, fp8).
const std::vector<Field>& fields();
// The field with this exact key path, or nullptr.
const Field* find_field(std::string_view key);
// Top-level names in print order: "run", "model", "data", "train", "dist", "precision", "fp8".
const std::vector<std::string>& top_level_names();
// The known key closest to a misspelt one (compares full paths and leaf names), or "" when
// nothing is close enough to be a useful suggestion.
std::string closest_key(std::string_view key);
// " (did you mean X?)" or "".
std::string did_you_mean(std::string_view key);

// Thrown by the value parsers below; the caller adds the key and where the value came from.
class ValueError : public std::runtime_error {
 public:
  explicit ValueError(const std::string& what, int line = -1) : std::runtime_error(what), line_(line) {}
  // 0-based YAML line of the offending element when it differs from the value's own line; -1 if not.
  int line() const { return line_; }

 private:
  int line_;
};

// Parses command-line text (`--set key=TEXT`, `--fp8-margin TEXT`) into a value of the field's
// type. GemmFlags accept "0,0,1" / "false,false,true" (or YAML flow "{wgrad: true}", "[0,0,1]");
// string lists accept "a,b" (or "[a, b]"); "" is the empty list. Throws ValueError.
Value parse_text(const Field& field, const std::string& text, const Value& current);
// Parses a YAML value node. GemmFlags accept a mapping (keys not given keep their `current`
// value), a list of three booleans or the comma text; string lists accept a list or comma
// text; a null node is "" for strings and [] for lists. Throws ValueError.
Value parse_node(const Field& field, const YAML::Node& node, const Value& current);
// The value as YAML flow text, as printed by to_yaml ("0.003", "HYBRID", "[lm_head]", ...).
std::string format_value(const Field& field, const Value& value);
// format_float and yaml_quote (the printers of floats and strings): lib/config/text.h.

// Keys whose values differ between two configs (by the table), in table order.
std::vector<std::string> differing_keys(const ExperimentConfig& a, const ExperimentConfig& b);

// Canonical names of the schema enums (the same spellings the experiment file uses).
const char* to_string(DeviceKind v);
const char* to_string(Precision v);
const char* to_string(NormKind v);
const char* to_string(Activation v);
const char* to_string(DataSource v);
const char* to_string(DataOrder v);
const char* to_string(LrSchedule v);

}  // namespace config

// Field-by-field equality through the table (every key of the experiment file).
bool operator==(const ExperimentConfig& a, const ExperimentConfig& b);

}  // namespace fp8t
