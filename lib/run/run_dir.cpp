#include "lib/run/run_dir.h"

#include <fcntl.h>     // ::open
#include <sys/file.h>  // ::flock
#include <sys/stat.h>  // ::mkdir
#include <signal.h>    // ::kill
#include <unistd.h>    // ::fsync, ::close, ::getpid, ::ftruncate, ::pwrite

#include <algorithm>     // std::sort
#include <atomic>        // std::atomic
#include <cerrno>        // errno
#include <cstdio>        // std::FILE, std::fopen, std::rename
#include <cstdlib>       // std::getenv, std::strtol
#include <cstring>       // std::strerror
#include <system_error>  // std::error_code

#include "lib/run/checkpoint_files.h"  // checkpoint_file_step, kept_checkpoints
#include "lib/util/crc32c.h"           // crc32c
#include "lib/util/error.h"            // FP8T_INPUT_CHECK, FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t::run {
namespace {

constexpr const char* kLockFile = ".fp8train.lock";

fs::path run_path(const std::string& out_dir, const std::string& name) {
  FP8T_INPUT_CHECK(!out_dir.empty(), "run.out_dir (--out-dir) must not be empty");
  FP8T_INPUT_CHECK(!name.empty(), "run.name (--run-name) must not be empty");
  FP8T_INPUT_CHECK(name != "." && name != ".." && name.find('/') == std::string::npos,
                   "run.name (--run-name) '", name,
                   "' must be a single folder name (no '/', not '.' or '..'); "
                   "use run.out_dir (--out-dir) to choose the parent folder");
  return fs::path(out_dir) / name;
}

bool is_fixed_name(const std::string& filename) {
  for (const std::string& f : RunDir::managed_files()) {
    if (filename == f) return true;
  }
  return false;
}

// True for the temporary files write_file_atomic leaves only when a process dies mid-write:
// ".<name>.tmp.<pid>.<n>" of a fixed name or a checkpoint file (kept checkpoints, shards).
bool is_managed_temp(const std::string& filename) {
  const size_t tag = filename.find(".tmp.");
  if (filename.empty() || filename[0] != '.' || tag == std::string::npos || tag < 2) return false;
  const std::string base = filename.substr(1, tag - 1);
  return is_fixed_name(base) || checkpoint_file_step(base).has_value();
}

// config.resume-<step>.yaml: the history of a resumed run's config.
bool is_config_history(const std::string& filename) {
  const std::string prefix = "config.resume-", suffix = ".yaml";
  return filename.size() > prefix.size() + suffix.size() && filename.rfind(prefix, 0) == 0 &&
         filename.compare(filename.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_managed(const std::string& filename) { return RunDir::is_managed_name(filename); }

// The pid a lock file records ("?" when unreadable).
std::string lock_owner(const fs::path& lock_path) {
  std::FILE* f = std::fopen(lock_path.c_str(), "rb");
  if (f == nullptr) return "?";
  char buf[32] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string pid(buf, n);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos ? "?" : pid;
}

[[noreturn]] void throw_in_use(const fs::path& dir) {
  FP8T_THROW(ExitCode::kBadInput, "run folder ", dir.string(), " is in use by pid ", lock_owner(dir / kLockFile),
             " (another fp8train writes it); wait for it to finish, stop it, or choose another --run-name");
}

// Read-only probe: whether another process holds the folder's lock. Opens the lock file
// read-only (creates nothing); no lock file means no writer.
bool lock_held(const fs::path& dir) {
  const int fd = ::open((dir / kLockFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

// Throws when another process holds the folder's lock.
void check_not_locked(const fs::path& dir) {
  if (lock_held(dir)) throw_in_use(dir);
}

bool only_lock_file(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename() != kLockFile) return false;
  }
  FP8T_INPUT_CHECK(!ec, "cannot read run folder ", dir.string(), ": ", ec.message());
  return true;
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

// The exclusive lock on <run>/.fp8train.lock, held from open() until the last copy of the
// RunDir is gone (or the process dies: the OS releases flock locks).
class RunDir::Lock {
 public:
  explicit Lock(const fs::path& dir) {
    const fs::path path = dir / kLockFile;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      FP8T_THROW(ExitCode::kBadInput, "cannot create the lock file ", path.string(), ": ", std::strerror(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      if (err == EWOULDBLOCK) throw_in_use(dir);
      FP8T_THROW(ExitCode::kBadInput, "cannot lock ", path.string(), ": ", std::strerror(err));
    }
    // Our pid, for the message of a second writer (best effort: the lock itself is what counts).
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
      // A full disk must not stop the run from holding its lock.
    }
  }
  ~Lock() { ::close(fd_); }  // releases the flock
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  int fd_ = -1;
};

const std::vector<std::string>& RunDir::managed_files() {
  // checkpoint.prev.pt: what earlier versions kept of the previous checkpoint (--overwrite removes it).
  static const std::vector<std::string> files = {"config.yaml",  "train.log",     "metrics.jsonl",
                                                 "summary.json", "checkpoint.pt", "checkpoint.prev.pt"};
  return files;
}

bool RunDir::is_managed_name(const std::string& filename) {
  return is_fixed_name(filename) || is_managed_temp(filename) || is_config_history(filename) ||
         checkpoint_file_step(filename).has_value();
}

void RunDir::check(const std::string& out_dir, const std::string& name, Mode mode) {
  check_folder(run_path(out_dir, name), mode, /*probe_lock=*/true);
}

std::optional<std::string> RunDir::writer_pid(const fs::path& dir) {
  if (!lock_held(dir)) return std::nullopt;
  return lock_owner(dir / kLockFile);
}

void RunDir::check_folder(const fs::path& dir, Mode mode, bool probe_lock) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  const bool exists = fs::exists(st);
  FP8T_INPUT_CHECK(!exists || fs::is_directory(st), "run folder ", dir.string(),
                   " exists but is not a folder");
  if (exists && probe_lock) check_not_locked(dir);
  switch (mode) {
    case Mode::kCreate:
      if (exists) {
        FP8T_INPUT_CHECK(only_lock_file(dir), "run folder ", dir.string(),
                         " already exists and is not empty; choose another name with "
                         "--run-name, replace it with --overwrite, or continue it with --resume");
      }
      break;
    case Mode::kOverwrite:
      break;
    case Mode::kResume: {
      FP8T_INPUT_CHECK(exists, "cannot resume: run folder ", dir.string(), " does not exist");
      const fs::path ckpt = dir / kCheckpointFile;
      FP8T_INPUT_CHECK(fs::is_regular_file(ckpt, ec) || !kept_checkpoints(dir).empty(), "cannot resume: run folder ",
                       dir.string(), " has no checkpoint (", ckpt.string(), "); start the run anew with --overwrite");
      break;
    }
  }
}

RunDir RunDir::locate(const std::string& out_dir, const std::string& name) { return RunDir(run_path(out_dir, name)); }

RunDir RunDir::open(const std::string& out_dir, const std::string& name, Mode mode) {
  check(out_dir, name, mode);
  RunDir run(run_path(out_dir, name));
  if (mode != Mode::kResume) {
    std::error_code ec;
    fs::create_directories(run.path_.parent_path(), ec);
    FP8T_INPUT_CHECK(!ec, "cannot create folder ", run.path_.parent_path().string(), ": ", ec.message());
    // mkdir, then lock: whoever locks first owns the folder; EEXIST is fine (checked below).
    if (::mkdir(run.path_.c_str(), 0755) != 0 && errno != EEXIST) {
      FP8T_THROW(ExitCode::kBadInput, "cannot create run folder ", run.path_.string(), ": ", std::strerror(errno));
    }
  }
  run.lock_ = std::make_shared<Lock>(run.path_);
  // Again under the lock (our own lock is not probed): another run may have written in between.
  check_folder(run.path_, mode, /*probe_lock=*/false);
  if (mode == Mode::kOverwrite) {
    run.remove_files(is_managed, "--overwrite");
  } else if (mode == Mode::kResume) {
    run.remove_files(is_managed_temp, "--resume");  // the leftovers of writes that were killed
  }
  return run;
}

void RunDir::remove_files(bool (*which)(const std::string&), const char* why) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(path_, ec)) {
    const std::string filename = entry.path().filename().string();
    const fs::file_status st = entry.symlink_status();
    // Only plain files (or links) with the names fp8train writes; folders are never removed.
    if (!which(filename) || !(fs::is_regular_file(st) || fs::is_symlink(st))) continue;
    std::error_code rm_ec;
    fs::remove(entry.path(), rm_ec);
    FP8T_INPUT_CHECK(!rm_ec, why, ": cannot remove ", entry.path().string(), ": ", rm_ec.message());
    removed_.push_back(filename);
  }
  FP8T_INPUT_CHECK(!ec, "cannot list run folder ", path_.string(), ": ", ec.message());
  std::sort(removed_.begin(), removed_.end());
}

void RunDir::write_text_atomic(const std::string& relative_name, const std::string& text) const {
  ::fp8t::run::write_text_atomic(path_ / relative_name, text);
}

std::string temporary_prefix(const fs::path& target) {
  // ".tmp.<pid>.<n>" takes at most 36 bytes (10 digits of pid, 20 of the counter); a name that
  // would not fit in NAME_MAX (255) with them is cut and told apart by a hash of the whole name.
  constexpr size_t kNameMax = 255, kSuffixMax = 36;
  const std::string name = target.filename().string();
  std::string prefix = ".";
  if (1 + name.size() + kSuffixMax <= kNameMax) {
    prefix.append(name);
  } else {
    size_t cut = kNameMax - kSuffixMax - 1 - 9;  // "." + cut + "~" + 8 hex digits
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0u) == 0x80u) --cut;  // a UTF-8 boundary
    char hash[16];
    std::snprintf(hash, sizeof hash, "~%08x", crc32c(name.data(), name.size()));
    prefix.append(name, 0, cut);
    prefix.append(hash);
  }
  prefix.append(".tmp.");
  return prefix;
}

std::vector<std::string> remove_stale_temporaries(const fs::path& target) {
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = temporary_prefix(target);
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // ".<name>.tmp.<pid>.<n>": a live writer's file is left alone.
    const std::string rest = name.substr(prefix.size());
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code rm;
    if (fs::remove(entry.path(), rm)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

void throw_if_disk_full_injected(const fs::path& target, const fs::path& written) {
  const char* name = std::getenv("FP8TRAIN_TEST_ENOSPC");
  if (name == nullptr || target.filename() != name) return;
  FP8T_THROW(ExitCode::kFailure, "cannot write ", written.string(), ": ", std::strerror(ENOSPC),
             " (injected by FP8TRAIN_TEST_ENOSPC)");
}

void write_file_atomic(const fs::path& target,
                       const std::function<void(const fs::path& tmp)>& write) {
  static std::atomic<uint64_t> counter{0};
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp_name = temporary_prefix(target);
  tmp_name.append(std::to_string(::getpid()));
  tmp_name.append(".");
  tmp_name.append(std::to_string(counter++));
  const fs::path tmp = dir / tmp_name;
  try {
    write(tmp);
    throw_if_disk_full_injected(target, tmp);
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

}  // namespace fp8t::run
