// The optimizer state in checkpoints, for any data-parallel layout (DDP or ZeRO-1 at any
// world size), so that a run can resume on a different number of ranks.
//
// Every optimizer state tensor is stored with the element range of its flattened parameter
// that it covers ("<name>.exp_avg", "<name>.exp_avg_sq", optionally "<name>.master": that range;
// "<name>.step": one value per parameter). Unsharded (dist.zero 0) the ranges are whole and the
// state lives in checkpoint.pt as "optim.*" (the single-file format). ZeRO-1 writes one shard
// file per rank, checkpoint.shard-<rank>-of-<world>.step-<step>.pt, each its own atomic,
// CRC32C-checked file holding that rank's ranges; checkpoint.pt, written last by rank 0, is the
// manifest: meta "zero" = {world_size, step, shards: [{file, crc32c, ranges}]}. A kill before
// checkpoint.pt is renamed leaves the previous checkpoint and its shards intact.
//
// Loading assembles each rank's current ranges from the overlapping parts of every source
// (one shard file in memory at a time), and checks that every element was covered.
//
// ZeRO-3 (dist.zero 3) has no rank that holds the whole model: each rank's shard file also holds
// its parts of the FP32 master weights, "model.<name>" over the same ranges, and the manifest
// says so ("model": the parameters' shapes); ModelStateLoader assembles them like the
// optimizer state, onto whole parameters or onto another layout's parts.
#pragma once

#include <cstdint>     // int64_t, uint32_t
#include <filesystem>  // std::filesystem::path
#include <functional>  // std::function
#include <map>         // std::map
#include <set>         // std::set
#include <string>      // std::string
#include <vector>      // std::vector

#include <ATen/core/Tensor.h>  // at::Tensor
#include <nlohmann/json.hpp>   // nlohmann::json

#include "lib/checkpoint/checkpoint.h"  // Checkpoint
#include "lib/optim/optimizer.h"  // AdamW, ParamRange

namespace fp8t::checkpoint {

// "checkpoint.shard-<rank>-of-<world>.step-<step>.pt".
std::string shard_file_name(int rank, int world, int64_t step);

// The ranges of `opt` as JSON {name: [begin, length]}, and back (kBadInput naming `what`).
nlohmann::json ranges_to_json(const std::map<std::string, optim::ParamRange>& ranges);
std::map<std::string, optim::ParamRange> ranges_from_json(const nlohmann::json& j, const std::string& what);

// This rank's shard file contents: "optim.<key>" tensors and meta {format, rank, world_size,
// step, ranges}.
Checkpoint make_optimizer_shard(const optim::AdamW& opt, int rank, int world, int64_t step);

// Fills `opt` from sources covering its ranges. add() each source, then finish().
class OptimizerStateLoader {
 public:
  // `param_names`: every parameter of the model (state of parameters that this rank does not
  // own is skipped; a name outside the model is an error).
  OptimizerStateLoader(optim::AdamW& opt, std::set<std::string> param_names);
  // `tensors`: "optim.<key>" entries (others ignored); `ranges`: what each parameter's tensors
  // cover (a parameter missing from it is taken as whole). `what` names the file in errors.
  void add(const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, optim::ParamRange>& ranges,
           const std::string& what);
  // Throws kBadInput when an element of this rank's state was not covered; else loads it.
  // Moments saved in the other train.moments_dtype are converted (bf16 -> fp32 exactly, fp32 ->
  // bf16 rounded to nearest even), with one log line saying so.
  void finish();

 private:
  optim::AdamW& opt_;
  std::set<std::string> param_names_;
  std::map<std::string, optim::ParamRange> mine_;
  std::map<std::string, at::Tensor> assembled_;  // CPU float32 copies of the live state
  std::map<std::string, int64_t> covered_;       // elements filled per key
  std::string converted_moments_;                // the saved moments' dtype when it is not the live one
};

// Fills model parameters, or this rank's parts of them, from sources that each cover element
// ranges of the flattened parameters ("model.<name>" tensors; others are ignored).
class ModelStateLoader {
 public:
  struct Target {
    std::string name;
    optim::ParamRange range;  // of the flattened parameter
    at::Tensor flat;          // range.length elements, written in place
  };
  // `param_names`: every parameter of the model (a source's part of a parameter this rank needs
  // none of is skipped; a name outside the model is an error).
  ModelStateLoader(std::vector<Target> targets, std::set<std::string> param_names);
  // `ranges`: what each parameter's tensor covers (a parameter missing from it is taken as whole).
  // A parameter this model does not have, or a tensor of the wrong size, is kBadInput naming `what`.
  void add(const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, optim::ParamRange>& ranges,
           const std::string& what);
  // Throws kBadInput when an element of a target was not covered.
  void finish() const;

 private:
  std::map<std::string, Target> targets_;
  std::set<std::string> param_names_;
  std::map<std::string, int64_t> covered_;
};

// The shard files listed by checkpoint.pt's meta["zero"] in `folder`, read one at a time
// (CRC32C and the manifest's checksum verified): fn(tensors, ranges, file) for each.
using ShardVisitor = std::function<void(const std::map<std::string, at::Tensor>& tensors,
                                        const std::map<std::string, optim::ParamRange>& ranges,
                                        const std::string& file)>;
void for_each_shard(const std::filesystem::path& folder, const nlohmann::json& manifest, const ShardVisitor& fn);

// ZeRO-1 and ZeRO-3 checkpoints: every shard file's optimizer state into `loader`.
void load_optimizer_shards(const std::filesystem::path& folder, const nlohmann::json& manifest,
                           OptimizerStateLoader& loader);

// Removes shard files in `folder` whose step is not in `keep` (those of checkpoint.pt and
// checkpoint.prev.pt).
void remove_stale_shards(const std::filesystem::path& folder, const std::set<int64_t>& keep);

}  // namespace fp8t::checkpoint
