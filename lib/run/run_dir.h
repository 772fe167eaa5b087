// The run folder <out_dir>/<name>/ and the files fp8train writes into it:
//
//   config.yaml    the resolved experiment config
//   train.log      the log file (debug level, timestamps)
//   metrics.jsonl  one JSON object per logged step / eval
//   summary.json   final results
//   checkpoint.pt  model + optimizer + FP8 scaling state (lib/checkpoint/checkpoint.h)
//   checkpoint.step-<S>.pt  older checkpoints (train.keep_checkpoints), and the files of a
//                  checkpoint such as ZeRO shards: the names are lib/run/checkpoint_files.h's
//   config.resume-<step>.yaml  the config a resume at <step> replaced (when it changed)
//   .fp8train.lock the lock of the process that writes the folder (empty of meaning otherwise)
//
// Nothing is created on disk before RunDir::open(); callers open the run folder only after
// the config is validated and the model is built, so bad input writes nothing. RunDir::check()
// runs the same existence checks without touching the disk, to fail early.
//
// One writer per folder: open() takes an exclusive flock on .fp8train.lock (held while any copy
// of the RunDir lives, released by the OS when the process dies, even by SIGKILL) and records
// its pid there. A second writer gets kBadInput "run folder ... is in use by pid N". The folder
// is created with mkdir and then locked, and its state checked again under the lock, so two
// runs that start at once cannot both write it.
#pragma once

#include <filesystem>  // std::filesystem::path
#include <functional>  // std::function
#include <memory>      // std::shared_ptr
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

namespace fp8t::run {

class RunDir {
 public:
  enum class Mode {
    kCreate,     // new run: the folder must not exist or be empty
    kOverwrite,  // replace a previous run: deletes the files listed above (only those)
    kResume,     // continue a run: the folder and its checkpoint must exist
  };

  // Validates `name` (one non-empty path component) and the folder's state for `mode`, then
  // creates the folder (kCreate, kOverwrite), takes the folder's lock and, for kOverwrite,
  // deletes the previous run's files; for kResume, the temporary files of checkpoint writes that
  // a killed process left are deleted. Throws fp8t::Error (kBadInput) with a message naming the
  // folder, e.g. for kCreate on a non-empty folder it suggests --run-name, --overwrite or
  // --resume, and "in use by pid N" when another process holds the lock.
  static RunDir open(const std::string& out_dir, const std::string& name, Mode mode);

  // The checks of open() (including whether another process holds the lock) without creating
  // or deleting anything.
  static void check(const std::string& out_dir, const std::string& name, Mode mode);

  // The run folder's paths without checking or touching the disk (for readers such as the
  // other ranks of a data-parallel job, which never write).
  static RunDir locate(const std::string& out_dir, const std::string& name);

  // The pid (as its lock file records it, "?" when unreadable) of the process that holds the
  // lock of the folder `dir` (a run that writes it), or nothing when none does. Read-only:
  // creates nothing (for readers such as `fp8train eval`).
  static std::optional<std::string> writer_pid(const std::filesystem::path& dir);

  // The names of the files fp8train writes into a run folder (the fixed names above).
  static const std::vector<std::string>& managed_files();
  // Whether fp8train writes a file of this name into a run folder: the fixed names, the
  // checkpoint files by step, config.resume-<step>.yaml and the temporary files of writes.
  static bool is_managed_name(const std::string& filename);

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path config_path() const { return path_ / "config.yaml"; }
  std::filesystem::path log_path() const { return path_ / "train.log"; }
  std::filesystem::path metrics_path() const { return path_ / "metrics.jsonl"; }
  std::filesystem::path summary_path() const { return path_ / "summary.json"; }
  std::filesystem::path checkpoint_path() const { return path_ / "checkpoint.pt"; }

  // The files open() deleted (sorted names), for the caller to log.
  const std::vector<std::string>& removed_files() const { return removed_; }
  // Whether this RunDir holds the folder's lock (open() does; locate() does not).
  bool locked() const { return lock_ != nullptr; }

  // Atomically writes <run>/<relative_name> (see write_text_atomic below).
  void write_text_atomic(const std::string& relative_name, const std::string& text) const;

 private:
  class Lock;
  static void check_folder(const std::filesystem::path& dir, Mode mode, bool probe_lock);
  // Deletes the plain files whose names `which` accepts, recording them in removed_.
  void remove_files(bool (*which)(const std::string&), const char* why);
  explicit RunDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
  std::vector<std::string> removed_;
  std::shared_ptr<Lock> lock_;  // shared by copies; released with the last one
};

// Replaces `target` atomically: `write` fills a temporary file
// temporary_prefix(target) + "<pid>.<n>" in the same folder, which is then fsync'ed and renamed
// over `target` (and the folder fsync'ed). If `write` throws or any step fails, the temporary
// file is removed, `target` is left as it was, and the error is rethrown (I/O failures as
// fp8t::Error kFailure naming the path). A process killed mid-write leaves the temporary file:
// RunDir::open removes those of a run folder, remove_stale_temporaries those of any file.
void write_file_atomic(const std::filesystem::path& target,
                       const std::function<void(const std::filesystem::path& tmp)>& write);

// ".<target name>.tmp.": the start of write_file_atomic's temporary names for `target`. A name
// too long for that to fit in 255 bytes is cut, with a hash of the whole name after "~".
std::string temporary_prefix(const std::filesystem::path& target);

// Removes the temporary files of `target` that killed writers left (those of processes that
// are still alive are kept). Returns the names removed, sorted.
std::vector<std::string> remove_stale_temporaries(const std::filesystem::path& target);

// Tests: with FP8TRAIN_TEST_ENOSPC=<file name> in the environment, throws the kFailure a full
// disk gives ("No space left on device", naming `written`) when `target` has that name. Every
// write of a run-folder file calls it, so that a test can fail exactly one file's write.
void throw_if_disk_full_injected(const std::filesystem::path& target, const std::filesystem::path& written);

// write_file_atomic with the whole of `text` as the content.
void write_text_atomic(const std::filesystem::path& target, const std::string& text);

}  // namespace fp8t::run
