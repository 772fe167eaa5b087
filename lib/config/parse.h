// The parsers of the config code: one per field type, each turning text into a typed value or
// throwing ValueError (fields.h) that says what was expected; and fail(), the kBadInput error
// that the loader and the validator raise with the key and where its value came from.
// parse_text, parse_node and format_value (declared in fields.h) are built on these.
#pragma once

#include <cstdint>  // int64_t, uint64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/config/fields.h"  // Field, GemmFlags, ValueError

namespace fp8t {
namespace config {

// Throws fp8t::Error (kBadInput) with `message`: every error of a config check.
[[noreturn]] void fail(const std::string& message);

// true/false, yes/no, 1/0 (any case).
bool parse_bool(const Field& f, const std::string& text);
// A whole number within [f.int_min, f.int_max] (one leading '+' allowed).
int64_t parse_int(const Field& f, const std::string& text);
// A whole number in [0, 2^64).
uint64_t parse_uint(const Field& f, const std::string& text);
// A finite number.
double parse_double(const Field& f, const std::string& text);
// One of f.choices (any case), returned in its canonical spelling; f.rejected spellings get
// their reason.
std::string parse_enum(const Field& f, const std::string& text);
// "0,0,1" or "false,false,true": fprop, dgrad, wgrad.
GemmFlags parse_gemm_flags_text(const Field& f, const std::string& text);
// "a, b" -> {"a", "b"}; "" -> {}; an empty entry is an error.
std::vector<std::string> parse_list_text(const Field& f, const std::string& text);

}  // namespace config
}  // namespace fp8t
