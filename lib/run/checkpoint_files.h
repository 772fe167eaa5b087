// The checkpoint files of a run folder and how they are named: the one place that knows.
//
//   checkpoint.pt              the newest checkpoint (what --resume and `export` read)
//   checkpoint.step-<S>.pt     an older checkpoint, after S steps, kept by train.keep_checkpoints
//   checkpoint.<part>.step-<S>.pt  a file that belongs to the checkpoint of step S, e.g. the
//                              ZeRO optimizer shards (lib/checkpoint/optimizer_state.h), which
//                              checkpoint.pt lists with their CRC32C as a manifest
//
// Every file but checkpoint.pt names the step it belongs to, so keeping N checkpoints means
// keeping the files of N steps; a new kind of shard file only has to end in ".step-<S>.pt".
// No LibTorch here.
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <optional>    // std::optional
#include <set>         // std::set
#include <string>      // std::string
#include <vector>      // std::vector

namespace fp8t::run {

inline constexpr const char* kCheckpointFile = "checkpoint.pt";

// "checkpoint.step-<S>.pt".
std::string kept_checkpoint_name(int64_t step);

// The step a checkpoint file belongs to: S for checkpoint.step-<S>.pt and for every
// checkpoint.<part>.step-<S>.pt; nothing for checkpoint.pt and for any other name.
std::optional<int64_t> checkpoint_file_step(const std::string& filename);

// Whether `filename` is a kept checkpoint (checkpoint.step-<S>.pt), not a part of one.
bool is_kept_checkpoint(const std::string& filename);

// The kept checkpoints in `folder`: step -> path, oldest first (an unreadable folder: none).
std::map<int64_t, std::filesystem::path> kept_checkpoints(const std::filesystem::path& folder);

// Removes the checkpoint files in `folder` (kept checkpoints and their parts) whose step is not
// in `keep`; checkpoint.pt is never touched. Returns the names removed, sorted. A file that
// cannot be removed is left (and not returned): retention must never fail a run.
std::vector<std::string> remove_checkpoint_files_except(const std::filesystem::path& folder,
                                                        const std::set<int64_t>& keep);

// Removes the kept checkpoints (not their parts) in `folder` whose step is in (after, ∞):
// after --resume-from, the checkpoints of the abandoned steps. Returns the names removed.
std::vector<std::string> remove_kept_checkpoints_after(const std::filesystem::path& folder, int64_t after);

// "steps 3, 5 (checkpoint.step-3.pt, checkpoint.step-5.pt)" or "none", for messages.
std::string describe_kept(const std::map<int64_t, std::filesystem::path>& kept);

}  // namespace fp8t::run
