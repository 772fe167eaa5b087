// lib/config/key_scan.*: the first unknown key is found while the YAML streams past, so a huge
// file of unknown keys is refused at once, with the loader's own message and line.
#include "lib/config/key_scan.h"

#include <chrono>  // std::chrono::steady_clock
#include <string>  // std::string

#include "lib/config/loader.h"  // load_from_string
#include "lib/util/error.h"     // fp8t::Error
#include "tests/catch.h"

using namespace fp8t::config;

namespace {
std::string error_of(const std::string& yaml) {
  try {
    check_known_keys(yaml, "x.yaml");
  } catch (const fp8t::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("key scan: unknown sections and keys, with the line; values and known keys pass", "[config]") {
  REQUIRE(error_of("") == "");
  REQUIRE(error_of("train:\n  lr: 0.1\n  steps: 3\nprecision: fp8\n"
                   "fp8:\n  override_linear_precision: {fprop: false, wgrad: true}\n  skip_layers: [lm_head]\n") == "");
  REQUIRE(error_of("model: ~\n") == "");
  REQUIRE(error_of("train:\n  lr: 0.1\n  lrr: 2\n") == "x.yaml:3: unknown key 'train.lrr' (did you mean train.lr?)");
  REQUIRE_THAT(error_of("trian:\n  lr: 0.1\n"), FP8T_CONTAINS("x.yaml:1: unknown section 'trian'"));
  // Keys below a key's value (a mapping value) are the value's business, not keys of the file.
  REQUIRE(error_of("fp8:\n  override_linear_precision:\n    nonsense: true\n") == "");
  // Malformed YAML is left to the loader (which reports it with its line).
  REQUIRE(error_of("train: [1, 2\n") == "");
}

TEST_CASE("key scan: the loader reports the same message as the scan", "[config]") {
  std::string loader_message;
  try {
    load_from_string("run:\n  seed: 1\ndata:\n  sourc: text\n", "x.yaml", {});
  } catch (const fp8t::Error& e) {
    loader_message = e.what();
  }
  REQUIRE(loader_message == "x.yaml:4: unknown key 'data.sourc' (did you mean data.source?)");
}

TEST_CASE("key scan: a 50 MB file of unknown keys is refused at its first key", "[config]") {
  std::string yaml = "train:\n";
  yaml.reserve(size_t{50} << 20);
  for (int i = 0; yaml.size() < (size_t{50} << 20); ++i) yaml += "  unknown_key_" + std::to_string(i) + ": 1\n";
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    load_from_string(yaml, "big.yaml", {});
  } catch (const fp8t::Error& e) {
    message = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_THAT(message, FP8T_CONTAINS("big.yaml:2: unknown key 'train.unknown_key_0'"));
  // Building the node tree first took 23.5 s and 2.6 GB for such a file; the scan stops at line 2
  // (milliseconds; 5 s leaves room for a loaded machine).
  WARN("50 MB of unknown keys refused in " << seconds << " s");
  REQUIRE(seconds < 5.0);
}
