// Shared assertions of the data tests.
#pragma once

#include <functional>        // std::function
#include <initializer_list>  // std::initializer_list
#include <string>            // std::string

#include "lib/util/error.h"  // fp8t::Error, ExitCode
#include "tests/catch.h"

namespace fp8t::data::testing {

// `action` must throw a bad-input error (exit code 2) whose message contains every needle.
inline void require_bad_input(const std::function<void()>& action,
                              std::initializer_list<std::string> needles) {
  try {
    action();
    FAIL("expected a bad-input error, nothing was thrown");
  } catch (const fp8t::Error& e) {
    INFO("message: " << e.what());
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    for (const std::string& needle : needles) REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS(needle));
  }
}

}  // namespace fp8t::data::testing
