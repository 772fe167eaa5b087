// The builders of the field table's entries (fields.cpp), one per value type. Each takes an
// accessor: a generic lambda `[](auto& c) -> auto& { return c.model.n_layer; }` that yields the
// member for both const and mutable configs, and makes the Field's get/set from it.
#pragma once

#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <string>       // std::string
#include <type_traits>  // std::remove_cvref_t
#include <utility>      // std::pair, std::move, std::declval
#include <vector>       // std::vector

#include "lib/config/fields.h"  // Field, Value, Range, Rejected, ValueError
#include "lib/config/text.h"    // quoted

namespace fp8t {
namespace config {

template <class Acc>
using MemberOf = std::remove_cvref_t<decltype(std::declval<Acc>()(std::declval<ExperimentConfig&>()))>;

// Key, type and help text: what every entry starts from.
inline Field basic_field(std::string key, FieldType type, std::string help) {
  Field f;
  f.key = std::move(key);
  f.type = type;
  f.help = std::move(help);
  return f;
}

// An entry whose Value alternative is `Stored`; the member converts to and from it.
template <class Stored, class Acc>
Field value_field(std::string key, FieldType type, std::string help, Acc acc,
                  std::optional<Range> range = std::nullopt) {
  Field f = basic_field(std::move(key), type, std::move(help));
  f.range = range;
  f.get = [acc](const ExperimentConfig& c) -> Value { return static_cast<Stored>(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = static_cast<MemberOf<Acc>>(std::get<Stored>(v)); };
  return f;
}

// bool_field, uint_field, float_field: value_field with the stored alternative and the field
// type fixed (one callable per kind, so the table reads `float_field("key", "help", acc, range)`).
template <class Stored, FieldType kType>
struct ValueFieldOf {
  template <class Acc>
  Field operator()(std::string key, std::string help, Acc acc, std::optional<Range> range = std::nullopt) const {
    return value_field<Stored>(std::move(key), kType, std::move(help), acc, range);
  }
};
inline constexpr ValueFieldOf<bool, FieldType::kBool> bool_field{};
inline constexpr ValueFieldOf<uint64_t, FieldType::kUInt> uint_field{};
inline constexpr ValueFieldOf<double, FieldType::kFloat> float_field{};

// The accepted interval is also limited to what the member's C++ type holds.
template <class Acc>
Field int_field(std::string key, std::string help, Acc acc, std::optional<Range> range = std::nullopt) {
  using T = MemberOf<Acc>;
  Field f = value_field<int64_t>(std::move(key), FieldType::kInt, std::move(help), acc, range);
  f.int_min = static_cast<int64_t>(std::numeric_limits<T>::min());
  f.int_max = static_cast<int64_t>(std::numeric_limits<T>::max());
  return f;
}


template <class Acc>
Field string_field(std::string key, std::string help, Acc acc) {
  return value_field<std::string>(std::move(key), FieldType::kString, std::move(help), acc);
}

template <class Acc>
Field string_list_field(std::string key, std::string help, Acc acc) {
  return value_field<std::vector<std::string>>(std::move(key), FieldType::kStringList, std::move(help), acc);
}

// For structs with bool members fprop, dgrad, wgrad.
template <class Acc>
Field gemm_flags_field(std::string key, std::string help, Acc acc) {
  Field f = basic_field(std::move(key), FieldType::kGemmFlags, std::move(help));
  f.get = [acc](const ExperimentConfig& c) -> Value {
    const auto& g = acc(c);
    return GemmFlags{g.fprop, g.dgrad, g.wgrad};
  };
  f.set = [acc](ExperimentConfig& c, const Value& v) {
    const auto& flags = std::get<GemmFlags>(v);
    auto& g = acc(c);
    g.fprop = flags[0];
    g.dgrad = flags[1];
    g.wgrad = flags[2];
  };
  return f;
}

template <class E>
using EnumNames = std::vector<std::pair<E, const char*>>;

template <class E>
const char* enum_name(const EnumNames<E>& names, E v) {
  for (const auto& [value, name] : names) {
    if (value == v) return name;
  }
  return "?";
}

template <class Acc, class E>
Field enum_field(std::string key, std::string help, const EnumNames<E>& names, Acc acc,
                 std::vector<Rejected> rejected = {}) {
  Field f = basic_field(std::move(key), FieldType::kEnum, std::move(help));
  for (const auto& [value, name] : names) f.choices.push_back(name);
  f.rejected = std::move(rejected);
  f.get = [acc, names](const ExperimentConfig& c) -> Value { return std::string(enum_name(names, acc(c))); };
  f.set = [acc, names](ExperimentConfig& c, const Value& v) {
    const auto& s = std::get<std::string>(v);
    for (const auto& [value, name] : names) {
      if (s == name) {
        acc(c) = value;
        return;
      }
    }
    throw ValueError("unknown value " + quoted(s));  // parse_enum only yields canonical names
  };
  return f;
}

}  // namespace config
}  // namespace fp8t
