#include "lib/checkpoint/history.h"

#include <spdlog/spdlog.h>  // spdlog::info, spdlog::debug
#include <unistd.h>         // ::getpid

#include <cctype>        // std::isdigit
#include <iterator>      // std::next
#include <system_error>  // std::error_code
#include <utility>       // std::move

#include "lib/run/checkpoint_files.h"  // kept_checkpoints, kept_checkpoint_name, remove_*
#include "lib/run/run_dir.h"           // temporary_prefix
#include "lib/util/error.h"            // FP8T_INPUT_CHECK, FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t::checkpoint {
namespace {

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

bool in_folder(const fs::path& file, const fs::path& folder) {
  std::error_code ec;
  return fs::equivalent(fs::absolute(file, ec).parent_path(), folder, ec);
}

}  // namespace

CheckpointHistory::CheckpointHistory(fs::path folder, int64_t keep, bool writer)
    : folder_(std::move(folder)), current_(folder_ / run::kCheckpointFile), keep_(keep), writer_(writer),
      kept_(run::kept_checkpoints(folder_)) {}

ResumeSource CheckpointHistory::resume_source(const std::string& resume_from) const {
  std::error_code ec;
  const std::string kept = run::describe_kept(kept_);
  if (resume_from.empty()) {
    FP8T_INPUT_CHECK(fs::is_regular_file(current_, ec), "cannot resume: ", current_.string(),
                     " does not exist; the run folder keeps the checkpoints of ", kept,
                     ": continue from one with --resume-from STEP");
    return {current_, std::nullopt, false};
  }
  if (all_digits(resume_from)) {
    const int64_t step = std::stoll(resume_from);
    if (const auto it = kept_.find(step); it != kept_.end()) return {it->second, step, true};
    FP8T_INPUT_CHECK(fs::is_regular_file(current_, ec), "--resume-from ", resume_from, ": the run folder ",
                     folder_.string(), " has no checkpoint of step ", step, "; it keeps ", kept);
    return {current_, step, true};  // checkpoint.pt, if it holds that step (checked once loaded)
  }
  const fs::path file(resume_from);
  FP8T_INPUT_CHECK(!fs::is_directory(file, ec), "--resume-from ", resume_from,
                   " is a folder; give a checkpoint file or a step (the run folder keeps ", kept, ")");
  FP8T_INPUT_CHECK(fs::is_regular_file(file, ec), "--resume-from ", resume_from,
                   ": no such checkpoint file (the run folder keeps ", kept, ")");
  return {file, std::nullopt, true};
}

void CheckpointHistory::resumed(const ResumeSource& source, int64_t step) {
  current_step_ = step;
  continued_ = source.file;
  if (source.explicit_choice && !same_file(source.file, current_)) rewound_to_ = step;
}

void CheckpointHistory::link_kept(const fs::path& from, int64_t step) const {
  const fs::path target = folder_ / run::kept_checkpoint_name(step);
  // A temporary name RunDir recognises (a kill in between leaves it for --resume to remove).
  const fs::path tmp = folder_ / (run::temporary_prefix(target) + std::to_string(::getpid()) + ".link");
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_hard_link(from, tmp, ec);
  if (ec) fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);  // no hard links here
  if (!ec) fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code rm;
    fs::remove(tmp, rm);
    FP8T_THROW(ExitCode::kFailure, "cannot keep the checkpoint of step ", step, " as ", target.string(), ": ",
               ec.message());
  }
}

void CheckpointHistory::before_save(int64_t step) {
  if (rewound_to_ >= 0) {
    if (writer_) {
      for (const std::string& name : run::remove_kept_checkpoints_after(folder_, rewound_to_)) {
        spdlog::info("removed {}: a checkpoint of the steps after {}, which this run trained again", name,
                     rewound_to_);
      }
    }
    for (auto it = kept_.upper_bound(rewound_to_); it != kept_.end();) it = kept_.erase(it);
    if (healthy_ > rewound_to_) healthy_ = -1;  // a checkpoint of the steps trained again
  }
  // keep 1 keeps no older checkpoint, but for the newest healthy one (the way back).
  const bool kept = keep_ >= 2 || current_step_ == healthy_;
  if (!kept || current_step_ < 0 || current_step_ == step || continued_.empty()) return;
  const fs::path target = folder_ / run::kept_checkpoint_name(current_step_);
  if (same_file(continued_, target)) return;  // resumed from the kept file itself
  if (!in_folder(continued_, folder_)) return;  // a file from elsewhere stays where it is
  if (writer_) link_kept(continued_, current_step_);
  kept_[current_step_] = target;
}

void CheckpointHistory::after_save(int64_t step) {
  current_step_ = step;
  continued_ = current_;
  rewound_to_ = -1;
  retire();
}

void CheckpointHistory::judged(int64_t step, bool healthy) {
  if (!healthy || step <= healthy_ || all().count(step) == 0) return;
  healthy_ = step;
  // The healthy one before may go now; not while --resume-from's later checkpoints wait for the
  // next save (before_save removes those first).
  if (step == current_step_ && rewound_to_ < 0) retire();
}

std::set<int64_t> CheckpointHistory::retained() const {
  std::set<int64_t> keep;
  if (current_step_ >= 0) keep.insert(current_step_);
  int64_t room = keep_ - 1;
  for (auto it = kept_.rbegin(); it != kept_.rend() && room > 0; ++it, --room) keep.insert(it->first);
  if (healthy_ >= 0) keep.insert(healthy_);
  return keep;
}

void CheckpointHistory::retire() {
  const std::set<int64_t> keep = retained();
  for (auto it = kept_.begin(); it != kept_.end();) it = keep.count(it->first) ? std::next(it) : kept_.erase(it);
  if (!writer_) return;
  for (const std::string& name : run::remove_checkpoint_files_except(folder_, keep)) {
    spdlog::debug("removed {} (train.keep_checkpoints {}; the newest healthy checkpoint: step {})", name, keep_,
                  healthy_);
  }
}

std::map<int64_t, fs::path> CheckpointHistory::all() const {
  std::map<int64_t, fs::path> out = kept_;
  if (rewound_to_ >= 0) {
    for (auto it = out.upper_bound(rewound_to_); it != out.end();) it = out.erase(it);
  }
  if (current_step_ >= 0) out[current_step_] = continued_;
  return out;
}

std::optional<std::pair<int64_t, fs::path>> CheckpointHistory::newest_before(int64_t step) const {
  const std::map<int64_t, fs::path> every = all();
  auto it = every.lower_bound(step);
  if (it == every.begin()) return std::nullopt;
  --it;
  return *it;
}

std::string CheckpointHistory::describe() const { return run::describe_kept(all()); }

}  // namespace fp8t::checkpoint
