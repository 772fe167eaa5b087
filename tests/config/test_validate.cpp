// lib/config/validate.cpp: rules that warn instead of failing (the errors are in test_errors.cpp).
#include <spdlog/sinks/ostream_sink.h>  // spdlog::sinks::ostream_sink_mt
#include <spdlog/spdlog.h>              // spdlog::default_logger

#include <memory>   // std::make_shared
#include <sstream>  // std::ostringstream
#include <string>   // std::string

#include "tests/config/config_test_util.h"  // from_yaml, parse_flags

using fp8t::config::testing::from_yaml;
using fp8t::config::testing::parse_flags;

namespace {

// The warnings logged while `f` runs.
template <class F>
std::string logged(F&& f) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::default_logger()->sinks().push_back(sink);
  f();
  spdlog::default_logger()->sinks().pop_back();
  return out.str();
}

}  // namespace

TEST_CASE("bf16 AdamW moments with beta2 > 0.99 warn that v stops tracking g^2; <= 0.99 is quiet", "[config]") {
  const std::string yaml = "train:\n  moments_dtype: bf16\n  beta2: 0.999\n";
  std::string text;
  const std::string log = logged([&] { text = fp8t::config::to_yaml(from_yaml(yaml).config); });
  CHECK_THAT(log, FP8T_CONTAINS("[warning]"));
  CHECK_THAT(log, FP8T_CONTAINS("train.moments_dtype (test.yaml:2) = bf16 with train.beta2 (test.yaml:3) = 0.999"));
  CHECK_THAT(log, FP8T_CONTAINS("below bf16's rounding"));
  CHECK_THAT(log, FP8T_CONTAINS("v stops tracking g^2"));
  CHECK_THAT(text, FP8T_CONTAINS("moments_dtype: bf16"));  // a warning: the config still loads
  CHECK(logged([&] { from_yaml("train:\n  moments_dtype: bf16\n  beta2: 0.99\n"); }).empty());
  CHECK(logged([&] { from_yaml("train:\n  beta2: 0.999\n"); }).empty());  // fp32 moments: no rounding
  CHECK_THAT(logged([&] { from_yaml("train:\n  beta2: 0.995\n", parse_flags({"--moments-dtype", "bf16"})); }),
             FP8T_CONTAINS("train.moments_dtype (--moments-dtype) = bf16"));
}
