#include "lib/util/error.h"

#include "tests/catch.h"

TEST_CASE("FP8T_INPUT_CHECK throws a bad-input error with location", "[util]") {
  try {
    FP8T_INPUT_CHECK(1 + 1 == 3, "key ", "train.lr", " must be positive");
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    REQUIRE(std::string(e.what()) == "key train.lr must be positive");
    REQUIRE_THAT(e.where(), FP8T_CONTAINS("test_error.cpp"));
  }
}

TEST_CASE("FP8T_CHECK passes silently and fails with exit code 1", "[util]") {
  REQUIRE_NOTHROW([] { FP8T_CHECK(true, "never"); }());
  try {
    FP8T_CHECK(false, "internal ", 42);
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kFailure);
    REQUIRE(std::string(e.what()) == "internal 42");
  }
}
