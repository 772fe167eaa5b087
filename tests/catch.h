// Catch2 v2 (Debian 12) and v3 (newer distributions) behind one include.
//
// SKIP("why") marks a test that cannot run on this machine (no GPU, a feature not built in).
// Catch2 v3 has it; for v2 it is defined here: the test case returns at once with a warning
// "SKIPPED: why", and tests/main.cpp lists every skipped test case after the run and exits 4
// (as v3 does) when every test case that ran was skipped. Under v2 SKIP works in a TEST_CASE's
// body only (it returns from the enclosing function), so helpers return a reason instead.
#pragma once
#if defined(FP8T_CATCH_V3)
#include <catch2/catch_approx.hpp>       // Catch::Approx
#include <catch2/catch_test_macros.hpp>  // TEST_CASE, REQUIRE, SKIP
#include <catch2/generators/catch_generators.hpp>  // GENERATE
#include <catch2/matchers/catch_matchers_string.hpp>  // ContainsSubstring
using Catch::Approx;
#define FP8T_CONTAINS(s) Catch::Matchers::ContainsSubstring(s)
#else
#include <catch2/catch.hpp>  // the v2 single header

#include <sstream>  // std::ostringstream
#include <string>   // std::string

#define FP8T_CONTAINS(s) Catch::Matchers::Contains(s)
namespace fp8t::test {
// Records a skipped test case (tests/main.cpp prints them).
void note_skipped(const std::string& test_case, const std::string& why);
}  // namespace fp8t::test
#define SKIP(...)                                                                                    \
  do {                                                                                               \
    std::ostringstream fp8t_skip_why;                                                                \
    fp8t_skip_why << __VA_ARGS__;                                                                    \
    ::fp8t::test::note_skipped(Catch::getResultCapture().getCurrentTestName(), fp8t_skip_why.str()); \
    WARN("SKIPPED: " << fp8t_skip_why.str());                                                        \
    return;                                                                                          \
  } while (0)
#endif
