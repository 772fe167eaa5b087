// lib/train/eval_inputs.*: where `fp8train eval` takes its weights and config from, before anything
// is built (tests/cli/test_eval.sh runs the whole command).
#include "lib/train/eval_inputs.h"

#include <torch/torch.h>  // torch::ones


#include "lib/model/safetensors.h"        // model::write_safetensors
#include "tests/catch.h"
#include "tests/data/data_test_checks.h"  // require_bad_input
#include "tests/temp_dir.h"               // TempDir

using namespace fp8t;
using fp8t::data::testing::require_bad_input;

TEST_CASE("eval inputs: the step fp8train export recorded in a safetensors file", "[train]") {
  test::TempDir dir("eval_inputs_step");
  model::write_safetensors(dir / "a.safetensors", {{"w", torch::ones({2})}}, {{"fp8train_step", "120"}});
  model::write_safetensors(dir / "b.safetensors", {{"w", torch::ones({2})}}, {{"format", "pt"}});
  model::write_safetensors(dir / "c.safetensors", {{"w", torch::ones({2})}}, {{"fp8train_step", "latest"}});
  CHECK(train::safetensors_step(dir / "a.safetensors") == std::optional<int64_t>(120));
  CHECK_FALSE(train::safetensors_step(dir / "b.safetensors").has_value());  // another tool's file
  CHECK_FALSE(train::safetensors_step(dir / "c.safetensors").has_value());  // not a number: no step shown
}

TEST_CASE("eval inputs: the weights named once, each flag where it applies", "[train]") {
  test::TempDir dir("eval_inputs_weights");
  train::EvalRequest both;
  both.run_dir = (dir / "run").string();
  both.weights = (dir / "m.safetensors").string();
  require_bad_input([&] { train::resolve_weights(both); }, {"--run DIR", "--weights FILE"});
  require_bad_input([&] { train::resolve_weights(train::EvalRequest{}); }, {"--run DIR", "--weights FILE"});

  train::EvalRequest step_without_run;
  step_without_run.weights = (dir / "m.safetensors").string();
  step_without_run.step = 3;
  require_bad_input([&] { train::resolve_weights(step_without_run); }, {"--step", "--run"});

  train::EvalRequest no_folder;
  no_folder.run_dir = (dir / "missing").string();
  require_bad_input([&] { train::resolve_weights(no_folder); }, {"missing", "no such folder"});

  std::filesystem::create_directories(dir / "empty");
  train::EvalRequest not_a_run;
  not_a_run.run_dir = (dir / "empty").string();
  require_bad_input([&] { train::resolve_weights(not_a_run); }, {"not a run folder", "config.yaml"});

  model::write_safetensors(dir / "m.safetensors", {{"w", torch::ones({2})}});
  train::EvalRequest shapeless;
  shapeless.weights = (dir / "m.safetensors").string();
  require_bad_input([&] { train::resolve_weights(shapeless); }, {"m.safetensors", "--config"});
}
