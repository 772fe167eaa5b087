// A minimal experiment file: keys left out take their defaults (the DEFAULT column of
// `fp8train --help`), in every section. Only the model shape and the data are given here; a
// misspelt or mistyped key is still refused with the key and the file's line; the resolved
// config (the run folder's config.yaml) lists every key and reads back to the same config.
#include <fstream>  // std::ifstream
#include <set>      // std::set
#include <sstream>  // std::ostringstream

#include "tests/config/config_test_util.h"

#include "lib/config/fields.h"  // fields, differing_keys
#include "lib/config/loader.h"  // load
#include "lib/config/print.h"   // to_yaml

using fp8t::ExperimentConfig;
using fp8t::config::fields;
using fp8t::config::LoadedConfig;
using fp8t::config::testing::bad_input_message;
using fp8t::config::testing::TempFile;

namespace {

// The model's shape and the data it reads (train_path has no default for a tokens source);
// every other key, of every section, is left out.
const char* kMinimal = R"(model:
  vocab_size: 256
  seq_len: 32
  n_layer: 3
  n_head: 2
  d_model: 64
data:
  source: tokens
  train_path: /dummy/train.bin
)";
constexpr size_t kMinimalKeys = 7;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("minimal config: the model shape and the data load, the rest are the defaults", "[config]") {
  const TempFile file("minimal.yaml", kMinimal);
  const LoadedConfig minimal = fp8t::config::load(file.path());  // validated
  const ExperimentConfig& c = minimal.config;
  CHECK(c.model.vocab_size == 256);
  CHECK(c.model.seq_len == 32);
  CHECK(c.model.n_layer == 3);
  CHECK(c.model.n_head == 2);
  CHECK(c.model.d_model == 64);
  CHECK(c.data.source == fp8t::DataSource::kTokens);
  CHECK(c.data.train_path == std::vector<std::string>{"/dummy/train.bin"});
  // Every key the file leaves out, in every section, holds its default, and says so.
  const std::vector<std::string> changed = fp8t::config::differing_keys(c, ExperimentConfig{});
  CHECK(changed == std::vector<std::string>{"model.vocab_size", "model.seq_len", "model.n_layer", "model.n_head",
                                            "model.d_model", "data.source", "data.train_path"});
  CHECK(minimal.sources.all().size() == kMinimalKeys);
  std::set<std::string> sections_left_out;
  for (const auto& f : fields()) {
    if (minimal.sources.is_default(f.key)) sections_left_out.insert(f.section().empty() ? f.key : f.section());
  }
  CHECK(sections_left_out == std::set<std::string>{"run", "model", "moe", "data", "train", "dist", "precision", "fp8"});
  CHECK(minimal.sources.origin("train.lr") == "default");
  CHECK(minimal.sources.origin("model.n_layer") == file.path() + ":4");
}

TEST_CASE("minimal config: the same values as a full file give the same resolved config", "[config]") {
  const LoadedConfig minimal = fp8t::config::load_from_string(kMinimal, "minimal.yaml");
  // The full file: every key written out, the minimal file's values and the defaults elsewhere.
  const std::string full_text = fp8t::config::to_yaml(minimal.config);
  const TempFile full_file("full.yaml", full_text);
  const LoadedConfig full = fp8t::config::load(full_file.path());
  CHECK(full.sources.all().size() == fields().size());  // every key came from the file ...
  CHECK(full.config == minimal.config);                  // ... and resolves to the same config
  CHECK(fp8t::config::differing_keys(full.config, minimal.config).empty());
}

TEST_CASE("minimal config: a misspelt key, a wrong type or a bad value is still refused with key and file",
          "[config]") {
  // n_layer misspelt on line 4.
  const TempFile typo("typo.yaml", "model:\n  vocab_size: 256\n  seq_len: 32\n  n_layers: 3\n");
  const std::string unknown = bad_input_message([&] { fp8t::config::load(typo.path()); });
  CHECK_THAT(unknown, FP8T_CONTAINS(typo.path() + ":4"));
  CHECK_THAT(unknown, FP8T_CONTAINS("unknown key 'model.n_layers'"));
  CHECK_THAT(unknown, FP8T_CONTAINS("did you mean model.n_layer?"));
  // A misspelt section is refused too, not skipped as a section left out.
  const TempFile section("section.yaml", "model:\n  n_layer: 3\ntrian:\n  steps: 10\n");
  const std::string unknown_section = bad_input_message([&] { fp8t::config::load(section.path()); });
  CHECK_THAT(unknown_section, FP8T_CONTAINS(section.path() + ":3"));
  CHECK_THAT(unknown_section, FP8T_CONTAINS("unknown section 'trian'"));
  CHECK_THAT(unknown_section, FP8T_CONTAINS("did you mean train?"));
  // A wrong type and a value out of range name the key, the file and the line.
  const TempFile type("type.yaml", "model:\n  n_layer: three\n");
  CHECK_THAT(bad_input_message([&] { fp8t::config::load(type.path()); }),
             FP8T_CONTAINS("model.n_layer (" + type.path() + ":2): expected an integer"));
  const TempFile range("range.yaml", "train:\n  lr: 0\n");
  const std::string out_of_range = bad_input_message([&] { fp8t::config::load(range.path()); });
  CHECK_THAT(out_of_range, FP8T_CONTAINS("train.lr (" + range.path() + ":2)"));
  CHECK_THAT(out_of_range, FP8T_CONTAINS("> 0"));
  // The key with no default for a tokens source: the error names it.
  const TempFile no_data("no_data.yaml", "data:\n  source: tokens\n");
  CHECK_THAT(bad_input_message([&] { fp8t::config::load(no_data.path()); }), FP8T_CONTAINS("data.train_path"));
}

TEST_CASE("minimal config: the resolved config written and read back round-trips", "[config]") {
  const LoadedConfig minimal = fp8t::config::load_from_string(kMinimal, "minimal.yaml");
  // What the run folder's config.yaml holds (lib/train/trainer.cpp writes to_yaml): every key.
  const std::string written = fp8t::config::to_yaml(minimal.config);
  for (const auto& f : fields()) {
    INFO(f.key);
    CHECK_THAT(written, FP8T_CONTAINS((f.section().empty() ? f.key : "  " + f.name()) + ": "));
  }
  const TempFile file("config.yaml", written);
  REQUIRE(read_file(file.path()) == written);
  const LoadedConfig back = fp8t::config::load(file.path());
  CHECK(back.config == minimal.config);
  CHECK(fp8t::config::to_yaml(back.config) == written);  // a second write is byte for byte the first
}
