#include "lib/train/run_dir.h"

#include <fcntl.h>   // ::open
#include <unistd.h>  // ::fsync, ::close, ::getpid

#include <algorithm>  // std::sort
#include <atomic>    // std::atomic
#include <cerrno>    // errno
#include <cstdio>    // std::FILE, std::fopen, std::rename
#include <cstring>   // std::strerror
#include <system_error>  // std::error_code

#include "lib/util/error.h"  // FP8T_INPUT_CHECK, FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t::train {
namespace {

fs::path run_path(const std::string& out_dir, const std::string& name) {
  FP8T_INPUT_CHECK(!out_dir.empty(), "run.out_dir (--out-dir) must not be empty");
  FP8T_INPUT_CHECK(!name.empty(), "run.name (--run-name) must not be empty");
  FP8T_INPUT_CHECK(name != "." && name != ".." && name.find('/') == std::string::npos,
                   "run.name (--run-name) '", name,
                   "' must be a single folder name (no '/', not '.' or '..'); "
                   "use run.out_dir (--out-dir) to choose the parent folder");
  return fs::path(out_dir) / name;
}

// True for the temporary files write_file_atomic leaves only when a process dies mid-write.
bool is_managed_temp(const std::string& filename) {
  for (const std::string& f : RunDir::managed_files()) {
    if (filename.rfind("." + f + ".tmp.", 0) == 0) return true;
  }
  return false;
}

bool is_managed(const std::string& filename) {
  for (const std::string& f : RunDir::managed_files()) {
    if (filename == f) return true;
  }
  return is_managed_temp(filename);
}

// fsync an existing file or folder; returns errno (0 on success).
int fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

}  // namespace

const std::vector<std::string>& RunDir::managed_files() {
  static const std::vector<std::string> files = {"config.yaml", "train.log", "metrics.jsonl",
                                                 "summary.json", "checkpoint.pt"};
  return files;
}

void RunDir::check(const std::string& out_dir, const std::string& name, Mode mode) {
  const fs::path dir = run_path(out_dir, name);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  const bool exists = fs::exists(st);
  FP8T_INPUT_CHECK(!exists || fs::is_directory(st), "run folder ", dir.string(),
                   " exists but is not a folder");
  switch (mode) {
    case Mode::kCreate:
      if (exists) {
        const bool empty = fs::is_empty(dir, ec);
        FP8T_INPUT_CHECK(!ec, "cannot read run folder ", dir.string(), ": ", ec.message());
        FP8T_INPUT_CHECK(empty, "run folder ", dir.string(),
                         " already exists and is not empty; choose another name with "
                         "--run-name, replace it with --overwrite, or continue it with --resume");
      }
      break;
    case Mode::kOverwrite:
      break;
    case Mode::kResume: {
      FP8T_INPUT_CHECK(exists, "cannot resume: run folder ", dir.string(), " does not exist");
      const fs::path ckpt = dir / "checkpoint.pt";
      FP8T_INPUT_CHECK(fs::is_regular_file(ckpt, ec), "cannot resume: run folder ", dir.string(),
                       " has no checkpoint (", ckpt.string(),
                       "); start the run anew with --overwrite");
      break;
    }
  }
}

RunDir RunDir::locate(const std::string& out_dir, const std::string& name) { return RunDir(run_path(out_dir, name)); }

RunDir RunDir::open(const std::string& out_dir, const std::string& name, Mode mode) {
  check(out_dir, name, mode);
  RunDir run(run_path(out_dir, name));
  if (mode == Mode::kResume) return run;

  std::error_code ec;
  fs::create_directories(run.path_, ec);
  FP8T_INPUT_CHECK(!ec, "cannot create run folder ", run.path_.string(), ": ", ec.message());

  if (mode == Mode::kOverwrite) {
    for (const fs::directory_entry& entry : fs::directory_iterator(run.path_, ec)) {
      const std::string filename = entry.path().filename().string();
      const fs::file_status st = entry.symlink_status();
      // Only plain files (or links) with the names fp8train writes; folders are never removed.
      if (!is_managed(filename) || !(fs::is_regular_file(st) || fs::is_symlink(st))) continue;
      std::error_code rm_ec;
      fs::remove(entry.path(), rm_ec);
      FP8T_INPUT_CHECK(!rm_ec, "--overwrite: cannot remove ", entry.path().string(), ": ",
                       rm_ec.message());
      run.removed_.push_back(filename);
    }
    FP8T_INPUT_CHECK(!ec, "cannot list run folder ", run.path_.string(), ": ", ec.message());
    std::sort(run.removed_.begin(), run.removed_.end());
  }
  return run;
}

void RunDir::write_text_atomic(const std::string& relative_name, const std::string& text) const {
  ::fp8t::train::write_text_atomic(path_ / relative_name, text);
}

void write_file_atomic(const fs::path& target,
                       const std::function<void(const fs::path& tmp)>& write) {
  static std::atomic<uint64_t> counter{0};
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp_name = ".";
  tmp_name.append(target.filename().string());
  tmp_name.append(".tmp.");
  tmp_name.append(std::to_string(::getpid()));
  tmp_name.append(".");
  tmp_name.append(std::to_string(counter++));
  const fs::path tmp = dir / tmp_name;
  try {
    write(tmp);
    const int sync_err = fsync_path(tmp, /*directory=*/false);
    if (sync_err != 0) {
      FP8T_THROW(ExitCode::kFailure, "cannot write ", tmp.string(), ": ",
                 std::strerror(sync_err));
    }
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      FP8T_THROW(ExitCode::kFailure, "cannot replace ", target.string(), " (rename from ",
                 tmp.string(), "): ", std::strerror(err));
    }
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  // Make the rename itself durable; a failure here leaves a complete file either way.
  (void)fsync_path(dir, /*directory=*/true);
}

void write_text_atomic(const fs::path& target, const std::string& text) {
  write_file_atomic(target, [&](const fs::path& tmp) {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
      const int err = errno;
      FP8T_THROW(ExitCode::kFailure, "cannot create ", tmp.string(), ": ", std::strerror(err));
    }
    const size_t written = std::fwrite(text.data(), 1, text.size(), f);
    const bool flushed = std::fflush(f) == 0;
    const int err = errno;
    const bool closed = std::fclose(f) == 0;
    if (written != text.size() || !flushed || !closed) {
      FP8T_THROW(ExitCode::kFailure, "cannot write ", tmp.string(), ": ", std::strerror(err));
    }
  });
}

}  // namespace fp8t::train
