// Which checkpoints a run folder keeps, and which one a resume continues.
//
// train.keep_checkpoints N keeps checkpoint.pt and the N-1 newest checkpoints before it as
// checkpoint.step-<S>.pt (names: lib/run/checkpoint_files.h), each with its CRC32C and, under
// ZeRO, its shard files. Before checkpoint.pt is replaced, the state it holds is hard-linked to
// its step name, so the sequence link, write, rename never leaves fewer than the kept states on
// disk, even when killed in between.
//
// --resume-from STEP|FILE continues from an older checkpoint. The checkpoints after that step
// belong to the steps that are trained again: they stay until the continued run writes its
// first checkpoint (a plain --resume until then still finds them), and are removed then, as the
// metrics rows after that step are on resume.
//
// After a divergence the run recommends the newest kept checkpoint whose next step was healthy
// (lib/checkpoint/health.h), not simply the newest one before the first skipped step. So the
// rotation never removes that checkpoint, the newest known healthy one, until a newer one is
// known healthy (judged): a run that diverges keeps its way back at every train.keep_checkpoints,
// train.keep_checkpoints 1 included. It may hold one checkpoint more than N for that: from the
// save after the healthy one until the step that judges the newer one (interval 1: always; else
// for one step after each save).
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <optional>    // std::optional
#include <set>         // std::set
#include <string>      // std::string
#include <utility>     // std::pair

namespace fp8t::checkpoint {

// What a resume reads: the file, and the step it must hold when the user named one.
struct ResumeSource {
  std::filesystem::path file;
  std::optional<int64_t> expected_step;  // --resume-from STEP
  bool explicit_choice = false;          // --resume-from was given
};

class CheckpointHistory {
 public:
  // `writer`: this process writes the folder (rank 0); the others only keep the bookkeeping.
  CheckpointHistory(std::filesystem::path folder, int64_t keep, bool writer);

  // The file a resume reads: checkpoint.pt (""), a kept step ("12"), or a file path. Throws
  // fp8t::Error (kBadInput) naming what is missing and the checkpoints the folder keeps.
  ResumeSource resume_source(const std::string& resume_from) const;
  // The checkpoint of `step` in `source` was loaded and the run continues from it.
  void resumed(const ResumeSource& source, int64_t step);

  // Before checkpoint.pt is replaced by the checkpoint of `step`: the checkpoints after a
  // --resume-from step are removed (the first time), and the state the run continues is kept
  // under its step name. Throws fp8t::Error (kFailure) when the link cannot be made.
  void before_save(int64_t step);
  // After checkpoint.pt holds `step`: the files of the checkpoints beyond the newest
  // train.keep_checkpoints are removed, but for the newest known healthy one (never fails; a file
  // left is logged).
  void after_save(int64_t step);
  // The checkpoint of `step` was judged by its next step (lib/checkpoint/health.h). A healthy one
  // newer than the last becomes the one the rotation keeps; when it is the state the run
  // continues, the healthy one before it, now outside train.keep_checkpoints, is removed. Steps
  // the run cannot go back to (not kept) are ignored.
  void judged(int64_t step, bool healthy);

  // The newest checkpoint of a step < `step` (checkpoint.pt included): for the divergence
  // message, the state before the first skipped step.
  std::optional<std::pair<int64_t, std::filesystem::path>> newest_before(int64_t step) const;
  // "steps 3, 5 (...)", every checkpoint the run folder holds now.
  std::string describe() const;
  // Every checkpoint the run can go back to now, by step (checkpoint.pt's state included): for
  // the divergence message (lib/checkpoint/health.h chooses among them).
  std::map<int64_t, std::filesystem::path> checkpoints() const { return all(); }
  // The step of the state the run continues: the checkpoint written last or resumed (-1: none).
  int64_t current_step() const { return current_step_; }
  // The newest checkpoint known healthy, which the rotation keeps (-1: none).
  int64_t healthy_step() const { return healthy_; }

 private:
  std::map<int64_t, std::filesystem::path> all() const;  // the kept ones and checkpoint.pt's
  void link_kept(const std::filesystem::path& from, int64_t step) const;
  // The steps whose files stay: the state the run continues, the newest keep - 1 kept ones and
  // the newest known healthy one.
  std::set<int64_t> retained() const;
  // Forgets the kept checkpoints outside retained() and (writer) removes their files.
  void retire();

  std::filesystem::path folder_;
  std::filesystem::path current_;  // <folder>/checkpoint.pt
  int64_t keep_;
  bool writer_;
  int64_t current_step_ = -1;            // the step of the state the run continues (-1: none yet)
  std::filesystem::path continued_;      // the file holding it: checkpoint.pt, or --resume-from's
  int64_t rewound_to_ = -1;              // --resume-from: checkpoints after this step go at the next save
  int64_t healthy_ = -1;                 // the newest checkpoint whose next step was healthy (-1: none known)
  std::map<int64_t, std::filesystem::path> kept_;  // checkpoint.step-<S>.pt files, by step
};

}  // namespace fp8t::checkpoint
