// Text helpers of the config code: case folding, trimming, comma lists, quoting for messages,
// number and YAML scalar printing, and the edit distance behind "did you mean".
#pragma once

#include <charconv>     // std::from_chars
#include <cstddef>      // size_t
#include <system_error>  // std::errc
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace fp8t {
namespace config {

// ASCII lower case.
std::string lower(std::string s);
// Without leading and trailing spaces and tabs.
std::string trim(const std::string& s);
// "a, b,c" -> {"a", "b", "c"} (entries trimmed; "" -> {""}).
std::vector<std::string> split_commas(const std::string& s);
// {"a", "b"} with ", " -> "a, b".
std::string join(const std::vector<std::string>& parts, const std::string& sep = ", ");
// 'text', for naming a value in a message.
std::string quoted(const std::string& s);

// Start of the digits of a number: skips one leading '+'; nullptr when what follows cannot
// start a number of the wanted signedness ("", "++1", "+-1", "-1" for unsigned).
const char* number_start(const std::string& text, bool allow_minus);
// Reads the whole text as a number of type T (one leading '+' allowed, '-' only with
// allow_minus) into `v`. Returns std::errc() on success, result_out_of_range when it does not
// fit T, else invalid_argument.
template <class T>
std::errc read_number(const std::string& text, bool allow_minus, T& v) {
  const char* b = number_start(text, allow_minus);
  const char* e = text.data() + text.size();
  if (b == nullptr) return std::errc::invalid_argument;
  const auto res = std::from_chars(b, e, v);
  if (res.ec != std::errc()) return res.ec;
  return res.ptr == e ? std::errc() : std::errc::invalid_argument;
}
// Whether the whole text reads as a floating-point number ("1", "+2.5", "1e-3", "inf").
bool looks_like_float(const std::string& text);
// Shortest text that reads back as the same double ("0.003", "1e-08", "1").
std::string shortest(double v);
// A double as the shortest text that reads back exactly, always with '.' or 'e' ("1.0", "0.003").
std::string format_float(double v);
// A string as a YAML scalar: plain when unambiguous, else double-quoted.
std::string yaml_quote(const std::string& s);

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace config
}  // namespace fp8t
