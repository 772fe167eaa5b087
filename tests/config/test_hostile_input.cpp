// Input a hostile user (or a sweep script with an empty variable) gives: flags swallowing flags,
// control characters and huge values in names, and fuzzed YAML (seeded mutations of the default
// config, which must only ever be accepted or refused with a bad-input error).
#include <CLI/CLI.hpp>

#include <random>  // std::mt19937

#include "tests/config/config_test_util.h"

#include "lib/config/cli_flags.h"
#include "lib/config/loader.h"
#include "lib/config/print.h"

using fp8t::config::Override;
using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::parse_flags;

namespace {

fp8t::ExperimentConfig with_name(const std::string& name) {
  return fp8t::config::load_from_string("run: {name: placeholder}\n", "test.yaml", {{"run.name", name, "--run-name"}})
      .config;
}

}  // namespace

TEST_CASE("hostile input: a flag's value that looks like a flag is refused", "[config]") {
  const std::string msg = bad_input_message([] { parse_flags({"--run-name", "--overwrite"}); });
  CHECK_THAT(msg, FP8T_CONTAINS("--run-name needs a value"));
  CHECK_THAT(msg, FP8T_CONTAINS("--set run.name=VALUE"));
  CHECK_THAT(bad_input_message([] { parse_flags({"--set", "--quiet"}); }), FP8T_CONTAINS("--set needs a value"));
  // Negative numbers are values.
  const auto got = parse_flags({"--fp8-margin", "-2", "--set", "train.lr=-.5"});
  REQUIRE(got.size() == 2);
  CHECK(got[0].value == "-2");
}

TEST_CASE("hostile input: run names with control characters or huge sizes are refused, echoed short", "[config]") {
  CHECK_THAT(bad_input_message([] { with_name("a\tb"); }), FP8T_CONTAINS("a\\x09b"));
  CHECK_THAT(bad_input_message([] { with_name("line\nbreak"); }), FP8T_CONTAINS("control characters"));
  const std::string huge(5 * 1000 * 1000, 'x');  // a sweep script's runaway variable
  const std::string msg = bad_input_message([&] { with_name(huge); });
  CHECK(msg.size() < 1000);
  CHECK_THAT(msg, FP8T_CONTAINS("5000000 bytes"));
  CHECK(with_name("run-ü_1.2").run.name == "run-ü_1.2");  // UTF-8 is fine
}

TEST_CASE("hostile input: seeded random mutations of the config YAML never crash the loader", "[config]") {
  // The CI variant of the libFuzzer target: byte flips, insertions, deletions and splices of
  // the default config. Every outcome must be a config or an fp8t::Error (kBadInput).
  const std::string base = fp8t::config::to_yaml(fp8t::ExperimentConfig{});
  const std::string alphabet = ":{}[]-,#&*!|>'\"%@`\n\t 0123456789.eE+-abcxyz\\";
  std::mt19937 rng(20261130);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[at] = static_cast<char>(rng() % 256); break;
        case 1: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: text.erase(at, 1 + rng() % 16); break;
        default: text.insert(at, text.substr(rng() % text.size(), rng() % 64)); break;
      }
    }
    try {
      (void)fp8t::config::load_from_string(text, "fuzz.yaml");
      ++accepted;
    } catch (const fp8t::Error& e) {
      INFO(text);
      REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
      ++refused;
    }
  }
  CHECK(accepted + refused == 3000);
  CHECK(refused > 0);
}
