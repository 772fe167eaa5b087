// lib/checkpoint/optimizer_state.*: the optimizer state as element ranges, moved between layouts
// (whole parameters <-> ZeRO-1 shards of any world size) and through shard files on disk.
#include "lib/checkpoint/optimizer_state.h"

#include <torch/torch.h>  // torch::NoGradGuard

#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/util/error.h"  // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"  // TempDir

using namespace fp8t;
using optim::AdamW;
using optim::AdamWOptions;
using checkpoint::OptimizerStateLoader;
using optim::ParamRange;

namespace {

struct Model {
  at::Tensor w, b;
  Model() {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
    w = at::randn({3, 5}, gen).requires_grad_();
    b = at::randn({7}, gen).requires_grad_();
  }
  optim::NamedParameters named() const { return {{"w", w}, {"b", b}}; }
  std::set<std::string> names() const { return {"w", "b"}; }
};

// A whole-parameter optimizer with a few steps of state (moments and step counts non-trivial).
void train_some(AdamW& opt, Model& m) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (int i = 0; i < 3; ++i) {
    m.w.mutable_grad() = at::randn({3, 5}, gen);
    m.b.mutable_grad() = at::randn({7}, gen);
    opt.step(1e-2);
  }
}

std::map<std::string, at::Tensor> with_prefix(const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, v] : state) out["optim." + k] = v;
  return out;
}

template <class F>
std::string bad_input(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    return e.what();
  }
  FAIL("no error");
  return "";
}

}  // namespace

TEST_CASE("optimizer state: whole -> two shards -> whole is exact, and uncovered state is refused", "[checkpoint]") {
  Model m;
  AdamW whole(m.named(), AdamWOptions{});
  train_some(whole, m);
  // Rank 0 owns w[0, 9), rank 1 w[9, 15) and all of b (as GradientSync's segments would be).
  const std::vector<optim::ShardRanges> layout = {{{"w", {0, 9}}}, {{"w", {9, 6}}, {"b", {0, 7}}}};
  std::vector<std::unique_ptr<AdamW>> shards;
  for (const auto& ranges : layout) {
    shards.push_back(std::make_unique<AdamW>(m.named(), AdamWOptions{}, ranges));
    OptimizerStateLoader loader(*shards.back(), m.names());
    loader.add(with_prefix(whole.state_dict()), {}, "whole");  // DDP -> ZeRO-1
    loader.finish();
  }
  CHECK(at::equal(shards[0]->state_dict().at("w.exp_avg"), whole.state_dict().at("w.exp_avg").view(-1).narrow(0, 0, 9)));
  CHECK(at::equal(shards[1]->state_dict().at("b.exp_avg_sq"), whole.state_dict().at("b.exp_avg_sq")));
  CHECK(shards[1]->state_dict().at("w.step").item<float>() == 3.0f);

  Model again;
  AdamW back(again.named(), AdamWOptions{});  // ZeRO-1 (2 ranks) -> one process
  OptimizerStateLoader loader(back, again.names());
  for (const auto& s : shards) loader.add(with_prefix(s->state_dict()), s->ranges(), "shard");
  loader.finish();
  for (const auto& [key, t] : whole.state_dict()) {
    INFO(key);
    CHECK(at::equal(back.state_dict().at(key), t));
  }

  // Only rank 0's shard: w[9, 15) and b are missing (keys are checked in name order: b first).
  AdamW partial(again.named(), AdamWOptions{});
  OptimizerStateLoader missing(partial, again.names());
  missing.add(with_prefix(shards[0]->state_dict()), shards[0]->ranges(), "shard 0");
  CHECK_THAT(bad_input([&] { missing.finish(); }), FP8T_CONTAINS("covers 0 of the 7 elements of 'b.exp_avg'"));
  missing.add(with_prefix(shards[1]->state_dict()), {{"w", {9, 6}}, {"b", {0, 7}}}, "shard 1, w only half");
  // The b state is now complete; w[0, 9) came from shard 0 and w[9, 15) from shard 1: complete.
  REQUIRE_NOTHROW(missing.finish());
  AdamW partial_w(again.named(), AdamWOptions{});
  OptimizerStateLoader half(partial_w, again.names());
  half.add(with_prefix(shards[1]->state_dict()), shards[1]->ranges(), "shard 1");
  CHECK_THAT(bad_input([&] { half.finish(); }), FP8T_CONTAINS("covers 6 of the 15 elements of 'w.exp_avg'"));
  // State of a parameter the model does not have.
  OptimizerStateLoader stranger(partial, again.names());
  CHECK_THAT(bad_input([&] { stranger.add({{"optim.lm_head.exp_avg", at::zeros({2})}}, {}, "other.pt"); }),
             FP8T_CONTAINS("other.pt has optimizer state 'lm_head.exp_avg' for no parameter of this model"));
}

TEST_CASE("optimizer state: ZeRO-1 shard files with a manifest load back; a swapped shard is refused", "[checkpoint]") {
  test::TempDir dir("optim_shards");
  Model m;
  AdamW whole(m.named(), AdamWOptions{});
  train_some(whole, m);
  const std::vector<optim::ShardRanges> layout = {{{"w", {0, 8}}}, {{"w", {8, 7}}, {"b", {0, 7}}}};
  nlohmann::json manifest = {{"world_size", 2}, {"step", 3}, {"shards", nlohmann::json::array()}};
  for (int r = 0; r < 2; ++r) {
    AdamW shard(m.named(), AdamWOptions{}, layout[r]);
    OptimizerStateLoader loader(shard, m.names());
    loader.add(with_prefix(whole.state_dict()), {}, "whole");
    loader.finish();
    const std::string file = checkpoint::shard_file_name(r, 2, 3);
    CHECK(file == "checkpoint.shard-" + std::to_string(r) + "-of-2.step-3.pt");
    const uint32_t crc = checkpoint::save_checkpoint(dir.path() / file, checkpoint::make_optimizer_shard(shard, r, 2, 3));
    manifest["shards"].push_back({{"file", file}, {"crc32c", crc}});
  }
  Model again;
  AdamW back(again.named(), AdamWOptions{});
  OptimizerStateLoader loader(back, again.names());
  checkpoint::load_optimizer_shards(dir.path(), manifest, loader);
  loader.finish();
  for (const auto& [key, t] : whole.state_dict()) CHECK(at::equal(back.state_dict().at(key), t));

  // A shard file that is not the one the manifest lists (e.g. from another save).
  manifest["shards"][1]["crc32c"] = manifest["shards"][1]["crc32c"].get<uint32_t>() ^ 1u;
  OptimizerStateLoader other(back, again.names());
  CHECK_THAT(bad_input([&] { checkpoint::load_optimizer_shards(dir.path(), manifest, other); }),
             FP8T_CONTAINS("it is not the shard that"));
  // Stale shards (steps other than the kept ones) are removed.
  checkpoint::remove_stale_shards(dir.path(), {7});
  CHECK_FALSE(std::filesystem::exists(dir.path() / checkpoint::shard_file_name(0, 2, 3)));
}
