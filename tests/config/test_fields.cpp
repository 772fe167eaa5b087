// The field table itself: one distinct entry per key, and the generic per-key machinery
// (set one key, print, read back) works for every entry.
#include <set>

#include "tests/config/config_test_util.h"

#include "lib/config/fields.h"
#include "lib/config/loader.h"
#include "lib/config/print.h"

using fp8t::ExperimentConfig;
using fp8t::config::Field;
using fp8t::config::FieldType;
using fp8t::config::fields;
using fp8t::config::Value;

namespace {

// A different value of the same type (not necessarily valid for validate()).
Value changed(const Field& f, const Value& v) {
  switch (f.type) {
    case FieldType::kBool: return !std::get<bool>(v);
    case FieldType::kInt: return std::get<int64_t>(v) + 3;
    case FieldType::kUInt: return std::get<uint64_t>(v) + 3;
    case FieldType::kFloat: return std::get<double>(v) * 0.5 + 0.125;
    case FieldType::kString: return std::get<std::string>(v) + "-x y";
    case FieldType::kEnum: {
      const auto& s = std::get<std::string>(v);
      for (size_t i = 0; i < f.choices.size(); ++i) {
        if (f.choices[i] == s) return f.choices[(i + 1) % f.choices.size()];
      }
      return s;
    }
    case FieldType::kGemmFlags: {
      auto g = std::get<fp8t::config::GemmFlags>(v);
      g[2] = !g[2];
      return g;
    }
    case FieldType::kStringList: {
      auto l = std::get<std::vector<std::string>>(v);
      l.push_back("blocks.0.mlp");
      return l;
    }
  }
  return v;
}

}  // namespace

TEST_CASE("the field table has unique, documented keys in section order", "[config]") {
  std::set<std::string> keys;
  for (const auto& f : fields()) {
    INFO(f.key);
    CHECK(keys.insert(f.key).second);
    CHECK_FALSE(f.help.empty());
    CHECK(fp8t::config::find_field(f.key) == &f);
    if (f.type == FieldType::kEnum) CHECK(f.choices.size() >= 2);
  }
  CHECK(fp8t::config::top_level_names() ==
        std::vector<std::string>{"run", "model", "moe", "data", "train", "dist", "precision", "fp8"});
  CHECK(fp8t::config::find_field("model.nope") == nullptr);
  CHECK(fp8t::config::find_field("model") == nullptr);
  CHECK(fields().size() == 96);  // a key added to experiment.h / recipe.h needs a table entry
}

TEST_CASE("setting one key changes exactly that key and survives printing", "[config]") {
  const ExperimentConfig defaults;
  for (const auto& f : fields()) {
    INFO(f.key);
    ExperimentConfig c = defaults;
    const Value v = changed(f, f.get(defaults));
    REQUIRE(v != f.get(defaults));
    f.set(c, v);
    CHECK(f.get(c) == v);
    CHECK(fp8t::config::differing_keys(c, defaults) == std::vector<std::string>{f.key});
    CHECK_FALSE(c == defaults);
    // Print, read back without validation (the changed value may break a cross-key rule).
    fp8t::config::LoadedConfig back;
    fp8t::config::apply_yaml(fp8t::config::to_yaml(c), "printed.yaml", back);
    CHECK(back.config == c);
  }
}

TEST_CASE("closest_key suggests near misses only", "[config]") {
  using fp8t::config::closest_key;
  CHECK(closest_key("model.nlayer") == "model.n_layer");
  CHECK(closest_key("model.n_layers") == "model.n_layer");
  CHECK(closest_key("fp8.amax_history_length") == "fp8.amax_history_len");
  CHECK(closest_key("train.seed") == "run.seed");
  CHECK(closest_key("modle") == "model");
  CHECK(closest_key("precison") == "precision");
  CHECK(closest_key("zzzzzzzzzzzz.qqqqqqqqqq") == "");
}

TEST_CASE("describe_keys lists every key with type, default and help", "[config]") {
  const std::string table = fp8t::config::describe_keys();
  const ExperimentConfig defaults;
  for (const auto& f : fields()) {
    INFO(f.key);
    CHECK_THAT(table, FP8T_CONTAINS(f.key + " "));
    CHECK_THAT(table, FP8T_CONTAINS(f.help));
  }
  CHECK_THAT(table, FP8T_CONTAINS("KEY"));
  CHECK_THAT(table, FP8T_CONTAINS("fp32|bf16|fp16|fp8"));
  CHECK_THAT(table, FP8T_CONTAINS("int >= 1"));
  CHECK_THAT(table, FP8T_CONTAINS("float in [0, 1)"));
  CHECK_THAT(table, FP8T_CONTAINS("[lm_head]"));  // default of fp8.skip_layers
}

TEST_CASE("value text: numbers, quoting and canonical printing", "[config]") {
  using fp8t::config::format_float;
  using fp8t::config::yaml_quote;
  CHECK(format_float(1.0) == "1.0");
  CHECK(format_float(0.003) == "0.003");
  CHECK(format_float(1e-8) == "1e-08");
  CHECK(yaml_quote("runs") == "runs");
  CHECK(yaml_quote("a/b_c-1.txt") == "a/b_c-1.txt");
  CHECK(yaml_quote("") == "\"\"");
  CHECK(yaml_quote("null") == "\"null\"");
  CHECK(yaml_quote("Yes") == "\"Yes\"");
  CHECK(yaml_quote("123") == "\"123\"");
  CHECK(yaml_quote("a b") == "\"a b\"");
  CHECK(yaml_quote("say \"hi\"\n") == "\"say \\\"hi\\\"\\n\"");
  const std::string y = fp8t::config::to_yaml(ExperimentConfig{});
  CHECK_THAT(y, FP8T_CONTAINS("run:\n  name: default\n"));
  CHECK_THAT(y, FP8T_CONTAINS("\nprecision: fp32\nfp8:\n"));
  CHECK_THAT(y, FP8T_CONTAINS("  override_linear_precision: {fprop: false, dgrad: false, wgrad: false}\n"));
  CHECK_THAT(y, FP8T_CONTAINS("  fast_accumulation: {fprop: true, dgrad: false, wgrad: false}\n"));
  CHECK_THAT(y, FP8T_CONTAINS("  lr: 0.003\n"));
  CHECK_THAT(y, FP8T_CONTAINS("  fp8_format: HYBRID\n"));
}
