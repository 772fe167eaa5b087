// Helpers shared by the [config] tests.
#pragma once

#include <unistd.h>  // getpid

#include <CLI/CLI.hpp>  // CLI::App

#include <filesystem>  // std::filesystem::path, temp_directory_path
#include <fstream>     // std::ofstream
#include <functional>  // std::function
#include <string>      // std::string
#include <vector>      // std::vector

#include "lib/config/cli_flags.h"   // add_config_flags
#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/config/fields.h"      // operator==
#include "lib/config/loader.h"      // load_from_string, Override
#include "lib/config/print.h"       // to_yaml
#include "lib/util/error.h"         // fp8t::Error, ExitCode
#include "tests/catch.h"

// Failed comparisons of configs print the whole config as YAML.
namespace Catch {
template <>
struct StringMaker<fp8t::ExperimentConfig> {
  static std::string convert(const fp8t::ExperimentConfig& c) { return "\n" + fp8t::config::to_yaml(c); }
};
}  // namespace Catch

namespace fp8t {
namespace config {
namespace testing {

// Parses `args` (without the program name) with the config flags registered.
inline std::vector<Override> parse_flags(const std::vector<std::string>& args) {
  CLI::App app("fp8train test");
  std::vector<Override> overrides;
  add_config_flags(app, &overrides);
  std::vector<const char*> argv = {"fp8train"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return overrides;
}

// Runs `f` and requires it to throw fp8t::Error with ExitCode::kBadInput; returns the message.
inline std::string bad_input_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const fp8t::Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == fp8t::ExitCode::kBadInput);
    return e.what();
  }
  FAIL("expected fp8t::Error(kBadInput), but nothing was thrown");
  return "";
}

// Loads YAML text named "test.yaml" (so messages read "test.yaml:LINE").
inline LoadedConfig from_yaml(const std::string& text, const std::vector<Override>& overrides = {}) {
  return load_from_string(text, "test.yaml", overrides);
}

inline std::string bad_yaml_message(const std::string& text, const std::vector<Override>& overrides = {}) {
  return bad_input_message([&] { from_yaml(text, overrides); });
}

// A file under the temp directory, removed when the object goes out of scope.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : path_(std::filesystem::temp_directory_path() /
              ("fp8t_config_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream out(path_);
    out << contents;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace testing
}  // namespace config
}  // namespace fp8t
