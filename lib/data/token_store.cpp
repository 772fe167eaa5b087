#include "lib/data/token_store.h"

#include <fcntl.h>     // ::open, ::posix_fadvise
#include <sys/stat.h>  // ::fstat
#include <unistd.h>    // ::pread, ::lseek, ::close

#include <algorithm>  // std::max_element, std::find_if, std::copy_n, std::min
#include <cerrno>     // errno
#include <cstring>    // std::strerror

#include "lib/util/error.h"  // FP8T_CHECK, FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::data {

struct TokenStore::OpenFile {
  int fd = -1;
  std::string path;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Calls f(typed pointer) for the stored width.
template <typename F>
decltype(auto) with_type(const void* data, int width, F&& f) {
  switch (width) {
    case 1:
      return f(static_cast<const uint8_t*>(data));
    case 2:
      return f(static_cast<const uint16_t*>(data));
    default:
      return f(static_cast<const uint32_t*>(data));
  }
}

int64_t max_of(const void* data, int width, int64_t n) {
  if (n <= 0) return -1;
  return with_type(data, width, [n](const auto* p) { return static_cast<int64_t>(*std::max_element(p, p + n)); });
}

// Reads up to `bytes` bytes at `offset`, retrying partial reads; returns the bytes read (fewer
// only at the end of the file) or -1 with errno set.
int64_t pread_fully(int fd, char* dst, uint64_t bytes, uint64_t offset) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, dst + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  return static_cast<int64_t>(done);
}

// Largest token in bytes [offset, offset + bytes) of the file: reads only its data extents
// (lseek SEEK_DATA/SEEK_HOLE; a hole is zeros, i.e. token 0) through one reused 8 MiB buffer.
int64_t scan_max(int fd, uint64_t offset, uint64_t bytes, int width, const std::string& path, std::string_view key) {
  if (bytes == 0) return -1;
  int64_t best = 0;  // every token is >= 0; a hole contributes exactly 0
  const uint64_t end = offset + bytes;
  std::vector<char> buf(size_t{8} << 20);
  uint64_t pos = offset;
  while (pos < end) {
    off_t data = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;                // only a hole remains
    if (data < 0) data = static_cast<off_t>(pos);         // no SEEK_DATA here: read everything
    uint64_t from = std::max<uint64_t>(static_cast<uint64_t>(data), pos);
    from = offset + (from - offset) / width * width;      // token aligned
    off_t hole = ::lseek(fd, static_cast<off_t>(from), SEEK_HOLE);
    uint64_t to = hole < 0 ? end : std::min<uint64_t>(static_cast<uint64_t>(hole), end);
    to = std::min(end, offset + (to - offset + width - 1) / width * width);
    if (from >= end) break;
    for (uint64_t at = from; at < to;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), to - at));
      const int64_t got = pread_fully(fd, buf.data(), want, at);
      FP8T_INPUT_CHECK(got == static_cast<int64_t>(want), key, ": cannot read data file '", path, "' at byte ", at,
                       got < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (file changed?)"));
      best = std::max(best, max_of(buf.data(), width, static_cast<int64_t>(want) / width));
      at += want;
    }
    pos = std::max(to, from + width);
  }
  return best;
}

// The error of a read that came up short: the file changed after the run opened it.
[[noreturn]] void throw_short_read(int fd, const std::string& path, uint64_t end, int64_t got, uint64_t from) {
  const int read_errno = errno;
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0;
  FP8T_THROW(ExitCode::kTrainingFailed, "data file '", path, "' changed while the run reads it: a window needs bytes ",
             from, "..", end, " but ",
             got < 0 ? std::string("the read failed: ") + std::strerror(read_errno)
                     : "the file " + (sized ? "is now " + std::to_string(st.st_size) + " bytes" : std::string("ended")),
             " (truncated or rewritten in place?). Restore the file and continue with --resume; to replace a "
             "shard during a run, write a new file and rename it over the old one");
}

}  // namespace

TokenStore::TokenStore(Storage tokens) {
  std::visit(
      [this](auto& v) {
        using Vec = std::decay_t<decltype(v)>;
        auto owned = std::make_shared<Vec>(std::move(v));
        data_ = owned->data();
        width_ = static_cast<int>(sizeof(typename Vec::value_type));
        size_ = static_cast<int64_t>(owned->size());
        owner_ = owned;
      },
      tokens);
  max_token_ = max_of(data_, width_, size_);
}

TokenStore TokenStore::open_file(const std::string& path, uint64_t offset, int64_t count, int width,
                                 std::string_view key) {
  FP8T_CHECK(width == 2 || width == 4, "open_file: token width must be 2 or 4, got ", width);
  TokenStore store;
  store.width_ = width;
  store.size_ = count;
  store.offset_ = offset;
  auto file = std::make_shared<OpenFile>();
  file->path = path;
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FP8T_INPUT_CHECK(file->fd >= 0, key, ": cannot open data file '", path, "': ", std::strerror(errno));
  store.max_token_ = scan_max(file->fd, offset, static_cast<uint64_t>(count) * width, width, path, key);
  ::posix_fadvise(file->fd, 0, 0, POSIX_FADV_RANDOM);  // batches read scattered windows: no read-ahead
  store.file_ = std::move(file);
  return store;
}

const std::string& TokenStore::path() const {
  static const std::string none;
  return file_ ? file_->path : none;
}

int64_t TokenStore::at(int64_t index) const {
  FP8T_CHECK(index >= 0 && index < size_, "token index ", index, " out of range [0, ", size_, ")");
  int64_t token = 0;
  copy_to(index, 1, &token);
  return token;
}

int64_t TokenStore::find_first_at_least(int64_t limit) const {
  constexpr int64_t kChunk = int64_t{1} << 20;  // tokens per read: bounded memory for any file
  std::vector<int64_t> chunk;
  for (int64_t begin = 0; begin < size_; begin += kChunk) {
    const int64_t n = std::min(kChunk, size_ - begin);
    chunk.resize(static_cast<size_t>(n));
    copy_to(begin, n, chunk.data());
    const auto it = std::find_if(chunk.begin(), chunk.end(), [limit](int64_t t) { return t >= limit; });
    if (it != chunk.end()) return begin + (it - chunk.begin());
  }
  return -1;
}

void TokenStore::copy_to(int64_t start, int64_t length, int64_t* out) const {
  FP8T_CHECK(start >= 0 && length >= 0 && start + length <= size_, "token window [", start, ", ",
             start + length, ") out of range [0, ", size_, ")");
  if (!file_) {
    // One widening copy; the compiler vectorizes it for every element width.
    with_type(data_, width_, [&](const auto* p) { std::copy_n(p + start, length, out); });
    return;
  }
  thread_local std::vector<char> raw;  // one buffer per thread: the batch's rows are read in parallel
  const uint64_t bytes = static_cast<uint64_t>(length) * width_;
  const uint64_t from = offset_ + static_cast<uint64_t>(start) * width_;
  raw.resize(bytes);
  const int64_t got = pread_fully(file_->fd, raw.data(), bytes, from);
  if (got != static_cast<int64_t>(bytes)) throw_short_read(file_->fd, file_->path, from + bytes, got, from);
  with_type(raw.data(), width_, [&](const auto* p) { std::copy_n(p, length, out); });
}

}  // namespace fp8t::data
