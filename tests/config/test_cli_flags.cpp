// The config flags on a CLI11 app: command-line order, values, and errors.
#include <CLI/CLI.hpp>

#include "tests/config/config_test_util.h"

#include "lib/config/cli_flags.h"
#include "lib/config/fields.h"
#include "lib/config/loader.h"

using fp8t::config::Override;
using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::parse_flags;

namespace {

bool same(const Override& a, const Override& b) {
  return a.key == b.key && a.value == b.value && a.origin == b.origin;
}

}  // namespace

TEST_CASE("every dedicated flag appends one override in command-line order", "[config]") {
  const std::vector<Override> got = parse_flags(
      {"--precision", "fp8", "--steps", "50", "--seed", "7", "--run-name", "r1", "--out-dir", "/tmp/o",
       "--device", "cpu", "--fp8-margin", "2", "--fp8-interval", "3", "--fp8-format", "e4m3",
       "--fp8-amax-history-len", "32", "--fp8-amax-compute-algo", "most_recent",
       "--fp8-override-linear-precision", "0,0,1", "--fp8-stats", "--quiet", "--overwrite"});
  const std::vector<Override> want = {
      {"precision", "fp8", "--precision"},
      {"train.steps", "50", "--steps"},
      {"run.seed", "7", "--seed"},
      {"run.name", "r1", "--run-name"},
      {"run.out_dir", "/tmp/o", "--out-dir"},
      {"run.device", "cpu", "--device"},
      {"fp8.margin", "2", "--fp8-margin"},
      {"fp8.interval", "3", "--fp8-interval"},
      {"fp8.fp8_format", "e4m3", "--fp8-format"},
      {"fp8.amax_history_len", "32", "--fp8-amax-history-len"},
      {"fp8.amax_compute_algo", "most_recent", "--fp8-amax-compute-algo"},
      {"fp8.override_linear_precision", "0,0,1", "--fp8-override-linear-precision"},
      {"fp8.stats", "true", "--fp8-stats"},
      {"run.quiet", "true", "--quiet"},
      {"run.overwrite", "true", "--overwrite"},
  };
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(i << ": " << got[i].origin << " " << got[i].key << "=" << got[i].value);
    CHECK(same(got[i], want[i]));
  }

  const fp8t::ExperimentConfig c = fp8t::config::load("", got).config;
  CHECK(c.precision == fp8t::Precision::kFp8);
  CHECK(c.train.steps == 50);
  CHECK(c.run.seed == 7);
  CHECK(c.run.name == "r1");
  CHECK(c.run.out_dir == "/tmp/o");
  CHECK(c.run.device == fp8t::DeviceKind::kCpu);
  CHECK(c.fp8.margin == 2);
  CHECK(c.fp8.interval == 3);
  CHECK(c.fp8.fp8_format == fp8t::fp8::RecipeFormat::kE4M3);
  CHECK(c.fp8.amax_history_len == 32);
  CHECK(c.fp8.amax_compute_algo == fp8t::fp8::AmaxComputeAlgo::kMostRecent);
  CHECK(c.fp8.override_linear_precision.wgrad);
  CHECK_FALSE(c.fp8.override_linear_precision.fprop);
  CHECK(c.fp8.stats);
  CHECK(c.run.quiet);
  CHECK(c.run.overwrite);
}

TEST_CASE("every config flag names a key of the table", "[config]") {
  for (const auto& cf : fp8t::config::config_flags()) {
    INFO(cf.flag);
    const auto* f = fp8t::config::find_field(cf.key);
    REQUIRE(f != nullptr);
    // A switch sets its key to true; a bool key that is already true by default takes a value
    // (--cuda-graphs false), as every non-bool key does.
    const bool is_bool = f->type == fp8t::config::FieldType::kBool;
    const bool default_true = is_bool && fp8t::config::format_value(*f, f->get(fp8t::ExperimentConfig{})) == "true";
    CHECK(cf.is_switch == (is_bool && !default_true));
  }
}

TEST_CASE("--set and dedicated flags apply in command-line order", "[config]") {
  SECTION("the flag after --set wins") {
    const auto o = parse_flags({"--set", "train.steps=70", "--steps", "50"});
    REQUIRE(o.size() == 2);
    const auto loaded = fp8t::config::load_from_string("train:\n  steps: 100\n", "x.yaml", o);
    CHECK(loaded.config.train.steps == 50);
    CHECK(loaded.sources.origin("train.steps") == "--steps");
  }
  SECTION("--set after the flag wins") {
    const auto o = parse_flags({"--steps", "50", "--set", "train.steps=70"});
    const auto loaded = fp8t::config::load_from_string("train:\n  steps: 100\n", "x.yaml", o);
    CHECK(loaded.config.train.steps == 70);
    CHECK(loaded.sources.origin("train.steps") == "--set");
  }
  SECTION("a repeated flag: the last one wins") {
    const auto o = parse_flags({"--fp8-margin", "1", "--set", "model.n_layer=3", "--fp8-margin", "4"});
    REQUIRE(o.size() == 3);
    CHECK(same(o[1], Override{"model.n_layer", "3", "--set"}));
    const auto c = fp8t::config::load("", o).config;
    CHECK(c.fp8.margin == 4);
    CHECK(c.model.n_layer == 3);
  }
}

TEST_CASE("--set is repeatable, splits at the first '=' and takes any key", "[config]") {
  const auto o = parse_flags({"--set", "model.n_layer=4", "--set=data.val_path=a=b.bin", "--set",
                              "fp8.skip_layers=lm_head,wte", "--set", "run.name="});
  REQUIRE(o.size() == 4);
  CHECK(same(o[0], Override{"model.n_layer", "4", "--set"}));
  CHECK(same(o[1], Override{"data.val_path", "a=b.bin", "--set"}));
  CHECK(same(o[2], Override{"fp8.skip_layers", "lm_head,wte", "--set"}));
  CHECK(same(o[3], Override{"run.name", "", "--set"}));
}

TEST_CASE("--set without '=' is a kBadInput error at parse time", "[config]") {
  const std::string msg = bad_input_message([] { parse_flags({"--set", "model.n_layer"}); });
  CHECK_THAT(msg, FP8T_CONTAINS("--set"));
  CHECK_THAT(msg, FP8T_CONTAINS("KEY=VALUE"));
  CHECK_THAT(msg, FP8T_CONTAINS("model.n_layer"));
  CHECK_THAT(bad_input_message([] { parse_flags({"--set", "=4"}); }), FP8T_CONTAINS("missing key"));
}

TEST_CASE("flag values are checked at load and the error names the flag", "[config]") {
  const auto o = parse_flags({"--fp8-margin", "200"});
  REQUIRE(o.size() == 1);
  CHECK(o[0].value == "200");
  const std::string msg = bad_input_message([&] { fp8t::config::load("", o); });
  CHECK_THAT(msg, FP8T_CONTAINS("fp8.margin (--fp8-margin)"));
  CHECK_THAT(msg, FP8T_CONTAINS("in [-17, 17]"));

  const std::string unknown = bad_input_message([] { fp8t::config::load("", parse_flags({"--set", "fp8.marign=1"})); });
  CHECK_THAT(unknown, FP8T_CONTAINS("unknown key 'fp8.marign'"));
  CHECK_THAT(unknown, FP8T_CONTAINS("did you mean fp8.margin?"));
}

TEST_CASE("no flags, no overrides; help lists the flags", "[config]") {
  CHECK(parse_flags({}).empty());
  CLI::App app("fp8train test");
  std::vector<Override> overrides;
  fp8t::config::add_config_flags(app, &overrides);
  const std::string help = app.help();
  CHECK_THAT(help, FP8T_CONTAINS("--fp8-override-linear-precision"));
  CHECK_THAT(help, FP8T_CONTAINS("--set"));
  CHECK_THAT(help, FP8T_CONTAINS("fp32|bf16|fp16|fp8"));
}
