// Catch2 v2 (Debian 12) and v3 (newer distributions) behind one include.
#pragma once
#if defined(FP8T_CATCH_V3)
#include <catch2/catch_approx.hpp>       // Catch::Approx
#include <catch2/catch_test_macros.hpp>  // TEST_CASE, REQUIRE
#include <catch2/generators/catch_generators.hpp>  // GENERATE
#include <catch2/matchers/catch_matchers_string.hpp>  // ContainsSubstring
using Catch::Approx;
#define FP8T_CONTAINS(s) Catch::Matchers::ContainsSubstring(s)
#else
#include <catch2/catch.hpp>  // the v2 single header
#define FP8T_CONTAINS(s) Catch::Matchers::Contains(s)
#endif
