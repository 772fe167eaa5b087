// The run folder <out_dir>/<name>/ and the files fp8train writes into it:
//
//   config.yaml    the resolved experiment config
//   train.log      the log file (debug level, timestamps)
//   metrics.jsonl  one JSON object per logged step / eval
//   summary.json   final results
//   checkpoint.pt  model + optimizer + FP8 scaling state (lib/train/checkpoint.h)
//
// Nothing is created on disk before RunDir::open(); callers open the run folder only after
// the config is validated and the model is built, so bad input writes nothing. RunDir::check()
// runs the same existence checks without touching the disk, to fail early.
#pragma once

#include <filesystem>  // std::filesystem::path
#include <functional>  // std::function
#include <string>      // std::string
#include <vector>      // std::vector

namespace fp8t::train {

class RunDir {
 public:
  enum class Mode {
    kCreate,     // new run: the folder must not exist or be empty
    kOverwrite,  // replace a previous run: deletes the files listed above (only those)
    kResume,     // continue a run: the folder and its checkpoint must exist
  };

  // Validates `name` (one non-empty path component) and the folder's state for `mode`, then
  // creates the folder (kCreate, kOverwrite) and, for kOverwrite, deletes the previous run's
  // files. Throws fp8t::Error (kBadInput) with a message naming the folder, e.g. for kCreate on
  // a non-empty folder it suggests --run-name, --overwrite or --resume.
  static RunDir open(const std::string& out_dir, const std::string& name, Mode mode);

  // The checks of open() without creating or deleting anything.
  static void check(const std::string& out_dir, const std::string& name, Mode mode);

  // The run folder's paths without checking or touching the disk (for readers such as the
  // other ranks of a data-parallel job, which never write).
  static RunDir locate(const std::string& out_dir, const std::string& name);

  // The names of the files fp8train writes into a run folder (the list above).
  static const std::vector<std::string>& managed_files();

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path config_path() const { return path_ / "config.yaml"; }
  std::filesystem::path log_path() const { return path_ / "train.log"; }
  std::filesystem::path metrics_path() const { return path_ / "metrics.jsonl"; }
  std::filesystem::path summary_path() const { return path_ / "summary.json"; }
  std::filesystem::path checkpoint_path() const { return path_ / "checkpoint.pt"; }

  // The files open(kOverwrite) deleted (sorted names), for the caller to log.
  const std::vector<std::string>& removed_files() const { return removed_; }

  // Atomically writes <run>/<relative_name> (see write_text_atomic below).
  void write_text_atomic(const std::string& relative_name, const std::string& text) const;

 private:
  explicit RunDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
  std::vector<std::string> removed_;
};

// Replaces `target` atomically: `write` fills a temporary file ".<target name>.tmp.<pid>.<n>"
// in the same folder, which is then fsync'ed and renamed over `target` (and the folder
// fsync'ed). If `write` throws or any step fails, the temporary file is removed, `target` is
// left as it was, and the error is rethrown (I/O failures as fp8t::Error kFailure naming the
// path).
void write_file_atomic(const std::filesystem::path& target,
                       const std::function<void(const std::filesystem::path& tmp)>& write);

// write_file_atomic with the whole of `text` as the content.
void write_text_atomic(const std::filesystem::path& target, const std::string& text);

}  // namespace fp8t::train
