#include "lib/checkpoint/optimizer_state.h"

#include <fmt/format.h>     // fmt::format
#include <spdlog/spdlog.h>  // spdlog::info

#include <algorithm>  // std::max, std::min
#include <regex>      // std::regex
#include <utility>    // std::pair

#include <ATen/ATen.h>            // at::zeros_like, at::NoGradGuard
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not in ATen.h without the precompiled header)

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fs = std::filesystem;

namespace fp8t::checkpoint {
namespace {

constexpr const char* kShardFormat = "fp8train-optimizer-shard";

// "<name>.exp_avg" -> {"<name>", ".exp_avg"}; the suffixes of AdamW::state_dict().
std::pair<std::string, std::string> split_key(const std::string& key) {
  for (const char* suffix : {".exp_avg_sq", ".exp_avg", ".step", ".master"}) {
    const std::string s(suffix);
    if (key.size() > s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0) {
      return {key.substr(0, key.size() - s.size()), s};
    }
  }
  return {key, ""};
}

// A moments dtype as train.moments_dtype spells it.
std::string moments_name(at::ScalarType t) {
  if (t == at::kFloat) return "fp32";
  if (t == at::kBFloat16) return "bf16";
  return c10::toString(t);
}

// Copies the elements of `src` (a parameter's range: ranges[name], or all of it when absent)
// that fall in `mine` into `dst` (mine's elements, flat); returns how many. `what` names the
// tensor in errors.
int64_t copy_overlap(const at::Tensor& dst, optim::ParamRange mine, const at::Tensor& src,
                     const std::map<std::string, optim::ParamRange>& ranges, const std::string& name,
                     const std::string& what) {
  const auto it = ranges.find(name);
  const optim::ParamRange theirs = it != ranges.end() ? it->second : optim::ParamRange{0, src.numel()};
  FP8T_INPUT_CHECK(src.numel() == theirs.length, what, " has ", src.numel(), " elements but its range says ",
                   theirs.length);
  const int64_t lo = std::max(mine.begin, theirs.begin);
  const int64_t hi = std::min(mine.begin + mine.length, theirs.begin + theirs.length);
  if (hi <= lo) return 0;
  dst.narrow(0, lo - mine.begin, hi - lo).copy_(src.reshape(-1).narrow(0, lo - theirs.begin, hi - lo));
  return hi - lo;
}

}  // namespace

std::string shard_file_name(int rank, int world, int64_t step) {
  return fmt::format("checkpoint.shard-{}-of-{}.step-{}.pt", rank, world, step);
}

nlohmann::json ranges_to_json(const std::map<std::string, optim::ParamRange>& ranges) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, r] : ranges) j[name] = {r.begin, r.length};
  return j;
}

std::map<std::string, optim::ParamRange> ranges_from_json(const nlohmann::json& j, const std::string& what) {
  FP8T_INPUT_CHECK(j.is_object(), what, ": the optimizer ranges are not a JSON object");
  std::map<std::string, optim::ParamRange> out;
  for (const auto& [name, v] : j.items()) {
    FP8T_INPUT_CHECK(v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer(), what,
                     ": the range of '", name, "' is not [begin, length]");
    out[name] = optim::ParamRange{v[0].get<int64_t>(), v[1].get<int64_t>()};
  }
  return out;
}

Checkpoint make_optimizer_shard(const optim::AdamW& opt, int rank, int world, int64_t step) {
  Checkpoint ck;
  for (const auto& [k, v] : opt.state_dict()) ck.tensors["optim." + k] = v;
  ck.meta = {{"format", kShardFormat}, {"rank", rank}, {"world_size", world}, {"step", step},
             {"ranges", ranges_to_json(opt.ranges())}};
  return ck;
}

OptimizerStateLoader::OptimizerStateLoader(optim::AdamW& opt, std::set<std::string> param_names)
    : opt_(opt), param_names_(std::move(param_names)), mine_(opt.ranges()) {
  for (const auto& [key, live] : opt.state_dict()) {
    assembled_[key] = at::zeros(live.sizes(), at::TensorOptions().dtype(live.scalar_type()));
    covered_[key] = 0;
  }
}

void OptimizerStateLoader::add(const std::map<std::string, at::Tensor>& tensors,
                               const std::map<std::string, optim::ParamRange>& ranges, const std::string& what) {
  at::NoGradGuard no_grad;
  for (const auto& [full_key, src] : tensors) {
    if (full_key.rfind("optim.", 0) != 0) continue;
    const std::string key = full_key.substr(6);
    const auto [name, suffix] = split_key(key);
    FP8T_INPUT_CHECK(!suffix.empty() && param_names_.count(name) == 1, what, " has optimizer state '", key,
                     "' for no parameter of this model (it was written for a different model config)");
    const auto target = assembled_.find(key);
    if (target == assembled_.end()) continue;  // a parameter (or a master copy) this rank does not own
    if (suffix == ".step") {  // one count per parameter: every range of it holds the same
      FP8T_INPUT_CHECK(src.numel() == 1, what, ": '", key, "' is not a single step count");
      target->second.copy_(src.reshape({}));
      covered_[key] = 1;
      continue;
    }
    if ((suffix == ".exp_avg" || suffix == ".exp_avg_sq") && src.scalar_type() != target->second.scalar_type()) {
      converted_moments_ = moments_name(src.scalar_type());
    }
    covered_[key] += copy_overlap(target->second.view(-1), mine_.at(name), src, ranges, name, what + ": '" + key + "'");
  }
}

void OptimizerStateLoader::finish() {
  for (const auto& [key, t] : assembled_) {
    FP8T_INPUT_CHECK(covered_.at(key) == t.numel(), "the checkpoint's optimizer state covers ", covered_.at(key),
                     " of the ", t.numel(), " elements of '", key, "' on this rank (shard files missing or of "
                     "another run?)");
  }
  if (!converted_moments_.empty()) {
    const bool to_bf16 = opt_.options().moments_dtype == MomentsDtype::kBf16;
    spdlog::info("the checkpoint's AdamW moments are {}, this run's train.moments_dtype is {}: converted ({})",
                 converted_moments_, to_bf16 ? "bf16" : "fp32", to_bf16 ? "rounded to nearest even" : "exactly");
  }
  opt_.load_state_dict(assembled_);
}

ModelStateLoader::ModelStateLoader(std::vector<Target> targets, std::set<std::string> param_names)
    : param_names_(std::move(param_names)) {
  for (Target& t : targets) {
    covered_[t.name] = 0;
    targets_.emplace(t.name, std::move(t));
  }
}

void ModelStateLoader::add(const std::map<std::string, at::Tensor>& tensors,
                           const std::map<std::string, optim::ParamRange>& ranges, const std::string& what) {
  at::NoGradGuard no_grad;
  for (const auto& [key, src] : tensors) {
    if (key.rfind("model.", 0) != 0) continue;
    const std::string name = key.substr(6);
    FP8T_INPUT_CHECK(param_names_.count(name) == 1, what, " has a parameter '", name, "' this model does not have "
                     "(it was written for a different model config)");
    const auto it = targets_.find(name);
    if (it == targets_.end()) continue;  // a parameter this rank holds no part of
    covered_[name] += copy_overlap(it->second.flat, it->second.range, src, ranges, name, what + ": '" + key + "'");
  }
}

void ModelStateLoader::finish() const {
  for (const auto& [name, t] : targets_) {
    FP8T_INPUT_CHECK(covered_.at(name) == t.range.length, "the checkpoint covers ", covered_.at(name), " of the ",
                     t.range.length, " elements of parameter '", name, "' this rank needs (a checkpoint written "
                     "for a different model config, or shard files missing?)");
  }
}

void load_optimizer_shards(const fs::path& folder, const nlohmann::json& manifest, OptimizerStateLoader& loader) {
  for_each_shard(folder, manifest,
                 [&](const std::map<std::string, at::Tensor>& tensors,
                     const std::map<std::string, optim::ParamRange>& ranges, const std::string& file) { loader.add(tensors, ranges, file); });
}

void for_each_shard(const fs::path& folder, const nlohmann::json& manifest, const ShardVisitor& fn) {
  const std::string bad = "the ZeRO manifest of " + (folder / "checkpoint.pt").string();
  FP8T_INPUT_CHECK(manifest.is_object() && manifest.contains("shards") && manifest["shards"].is_array() &&
                       manifest.contains("world_size"), bad, " is incomplete");
  const int world = manifest["world_size"].get<int>();
  FP8T_INPUT_CHECK(static_cast<int>(manifest["shards"].size()) == world, bad, " lists ", manifest["shards"].size(),
                   " shard files for ", world, " ranks");
  for (int r = 0; r < world; ++r) {
    const nlohmann::json& entry = manifest["shards"][r];
    const fs::path path = folder / entry.at("file").get<std::string>();
    const Checkpoint shard = load_checkpoint(path);  // checks its own CRC32C
    const auto expected_crc = entry.at("crc32c").get<uint32_t>();
    FP8T_INPUT_CHECK(shard.crc32c == expected_crc, "corrupt checkpoint ", path.string(), ": it is not the shard ",
                     "that ", (folder / "checkpoint.pt").string(), " lists (CRC32C ", shard.crc32c, ", expected ",
                     expected_crc, ")");
    FP8T_INPUT_CHECK(shard.meta.value("format", "") == kShardFormat && shard.meta.value("rank", -1) == r &&
                         shard.meta.value("world_size", -1) == world, path.string(), " is not shard ", r, " of ",
                     world);
    fn(shard.tensors, ranges_from_json(shard.meta.at("ranges"), path.string()), path.string());
  }
}

void remove_stale_shards(const fs::path& folder, const std::set<int64_t>& keep) {
  static const std::regex kName(R"(checkpoint\.shard-\d+-of-\d+\.step-(\d+)\.pt)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kName)) continue;
    if (keep.count(std::stoll(m[1].str())) == 0) fs::remove(entry.path(), ec);
  }
}

}  // namespace fp8t::checkpoint
