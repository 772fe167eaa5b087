// Test entry point. Catch2 v3 brings its own main (Catch2::Catch2WithMain).
#if !defined(FP8T_CATCH_V3)
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>  // Catch2 v2 main()
#endif
