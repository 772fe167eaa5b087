// Test entry point. Catch2 v3 brings its own main (Catch2::Catch2WithMain) and its own SKIP.
// For Catch2 v2 this main runs the session, then lists the test cases that SKIP (tests/catch.h)
// left, and exits 4 when every test case that ran was skipped, as v3 does (ctest counts exit 4
// as "skipped": tests/CMakeLists.txt).
#if !defined(FP8T_CATCH_V3)
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>  // Catch::Session, Catch::TestEventListenerBase

#include <cstdio>  // std::printf
#include <map>     // std::map
#include <string>  // std::string

namespace {

std::map<std::string, std::string>& skipped() {
  static std::map<std::string, std::string> names;
  return names;
}
int g_test_cases = 0;

// Counts the test cases that ran (a test case with GENERATE or sections starts once).
struct CountTestCases : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    ++g_test_cases;
    TestEventListenerBase::testCaseStarting(info);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(CountTestCases)

namespace fp8t::test {
void note_skipped(const std::string& test_case, const std::string& why) { skipped().emplace(test_case, why); }
}  // namespace fp8t::test

int main(int argc, char* argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  if (!skipped().empty()) {
    std::printf("%zu of %d test cases skipped (they cannot run here):\n", skipped().size(), g_test_cases);
    for (const auto& [name, why] : skipped()) std::printf("  SKIPPED %s: %s\n", name.c_str(), why.c_str());
  }
  if (failed == 0 && g_test_cases > 0 && static_cast<int>(skipped().size()) == g_test_cases) return 4;
  return failed;
}
#endif
