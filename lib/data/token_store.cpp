#include "lib/data/token_store.h"

#include <fcntl.h>     // ::open
#include <sys/mman.h>  // ::mmap, ::munmap, ::madvise
#include <unistd.h>    // ::pread, ::lseek, ::close

#include <algorithm>  // std::max_element, std::find_if, std::copy_n, std::min
#include <cerrno>     // errno
#include <cstring>    // std::strerror

#include "lib/util/error.h"  // FP8T_CHECK, FP8T_INPUT_CHECK

namespace fp8t::data {
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

// A read-only mapping of a whole file, unmapped with the last TokenStore that uses it.
struct Mapping {
  void* base = nullptr;
  size_t length = 0;
  ~Mapping() {
    if (base != nullptr && base != MAP_FAILED) ::munmap(base, length);
  }
};

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

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
      const ssize_t got = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
      FP8T_INPUT_CHECK(got == static_cast<ssize_t>(want), key, ": cannot read data file '", path, "' at byte ", at,
                       got < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (file changed?)"));
      best = std::max(best, max_of(buf.data(), width, static_cast<int64_t>(want) / width));
      at += want;
    }
    pos = std::max(to, from + width);
  }
  return best;
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

TokenStore TokenStore::map_file(const std::string& path, uint64_t offset, int64_t count, int width,
                                std::string_view key) {
  FP8T_CHECK(width == 2 || width == 4, "map_file: token width must be 2 or 4, got ", width);
  TokenStore store;
  store.width_ = width;
  store.size_ = count;
  store.mapped_ = true;
  if (count == 0) return store;
  const Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  FP8T_INPUT_CHECK(file.fd >= 0, key, ": cannot open data file '", path, "': ", std::strerror(errno));
  auto mapping = std::make_shared<Mapping>();
  mapping->length = static_cast<size_t>(offset + static_cast<uint64_t>(count) * width);
  mapping->base = ::mmap(nullptr, mapping->length, PROT_READ, MAP_PRIVATE, file.fd, 0);
  FP8T_INPUT_CHECK(mapping->base != MAP_FAILED, key, ": cannot map data file '", path, "' (",
                   mapping->length, " bytes): ", std::strerror(errno));
  ::madvise(mapping->base, mapping->length, MADV_RANDOM);  // batches read scattered windows
  store.data_ = static_cast<const char*>(mapping->base) + offset;
  store.owner_ = mapping;
  store.max_token_ = scan_max(file.fd, offset, static_cast<uint64_t>(count) * width, width, path, key);
  return store;
}

int64_t TokenStore::at(int64_t index) const {
  FP8T_CHECK(index >= 0 && index < size_, "token index ", index, " out of range [0, ", size_, ")");
  return with_type(data_, width_, [index](const auto* p) { return static_cast<int64_t>(p[index]); });
}

int64_t TokenStore::find_first_at_least(int64_t limit) const {
  return with_type(data_, width_, [&](const auto* p) -> int64_t {
    const auto* it = std::find_if(p, p + size_, [limit](auto t) { return static_cast<int64_t>(t) >= limit; });
    return it == p + size_ ? -1 : static_cast<int64_t>(it - p);
  });
}

void TokenStore::copy_to(int64_t start, int64_t length, int64_t* out) const {
  FP8T_CHECK(start >= 0 && length >= 0 && start + length <= size_, "token window [", start, ", ",
             start + length, ") out of range [0, ", size_, ")");
  // One widening copy; the compiler vectorizes it for every element width.
  with_type(data_, width_, [&](const auto* p) { std::copy_n(p + start, length, out); });
}

}  // namespace fp8t::data
