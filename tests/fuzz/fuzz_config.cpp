// libFuzzer target: the YAML experiment-config loader (parse, overrides, validation). Any input
// must give a config or an fp8t::Error with ExitCode::kBadInput; anything else is a finding.
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <cstdint>  // uint8_t
#include <cstdlib>  // std::abort
#include <string>   // std::string

#include "lib/config/loader.h"  // config::load_from_string
#include "lib/util/error.h"     // fp8t::Error

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)fp8t::config::load_from_string(text, "fuzz.yaml");
  } catch (const fp8t::Error& e) {
    if (e.code() != fp8t::ExitCode::kBadInput) std::abort();
  }
  return 0;
}
