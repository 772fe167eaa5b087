#include "lib/checkpoint/checkpoint.h"

#include <fcntl.h>     // ::open
#include <sys/stat.h>  // ::fstat
#include <unistd.h>    // ::pread, ::close

#include <spdlog/spdlog.h>  // spdlog::warn

#include <array>    // std::array
#include <cerrno>   // errno
#include <cstdio>   // std::FILE
#include <cstring>  // std::strerror, std::memcpy
#include <map>      // std::map
#include <vector>   // std::vector

#include <ATen/ATen.h>                                       // at::Tensor ops
#include <caffe2/serialize/inline_container.h>               // PyTorchStreamWriter/Reader
#include <torch/csrc/jit/serialization/export.h>             // writeArchiveAndTensors
#include <torch/csrc/jit/serialization/import_read.h>        // readArchiveAndTensors
#include <torch/csrc/jit/serialization/pickler.h>            // Pickler

#include "lib/run/checkpoint_files.h"  // kept_checkpoints, describe_kept
#include "lib/run/run_dir.h"           // write_file_atomic
#include "lib/util/crc32c.h"           // crc32c_extend
#include "lib/util/error.h"            // FP8T_INPUT_CHECK, FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t::checkpoint {
namespace {

constexpr const char* kFormat = "fp8train-checkpoint";
constexpr int64_t kVersion = 2;         // 2: the checksum trailer is required
constexpr int64_t kOldestVersion = 1;   // 1: no trailer (read with a warning)

// The trailer after the zip payload: magic, payload size, CRC32C of the payload (little endian).
constexpr std::array<char, 8> kTrailerMagic = {'F', 'P', '8', 'T', 'C', 'R', 'C', '1'};
constexpr size_t kTrailerSize = 24;  // magic 8 + size 8 + crc 4 + reserved 4

std::array<char, kTrailerSize> make_trailer(uint64_t payload_size, uint32_t crc) {
  std::array<char, kTrailerSize> t{};
  std::memcpy(t.data(), kTrailerMagic.data(), 8);
  for (int i = 0; i < 8; ++i) t[8 + i] = static_cast<char>((payload_size >> (8 * i)) & 0xFFu);
  for (int i = 0; i < 4; ++i) t[16 + i] = static_cast<char>((crc >> (8 * i)) & 0xFFu);
  return t;
}

// A file opened for positional reads, closed on scope exit.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const fs::path& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    FP8T_INPUT_CHECK(fd_ >= 0, "cannot open checkpoint ", path.string(), ": ", std::strerror(errno));
    struct stat st {};
    FP8T_INPUT_CHECK(::fstat(fd_, &st) == 0, "cannot stat checkpoint ", path.string(), ": ", std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ReadOnlyFile() { ::close(fd_); }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  uint64_t size() const { return size_; }
  // Reads up to n bytes at pos; returns the count (short only at the end of the file).
  size_t read(uint64_t pos, void* buf, size_t n) const {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(pos + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

// The zip payload of a checkpoint file as the stream reader sees it (the trailer cut off).
class PayloadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  PayloadAdapter(std::shared_ptr<ReadOnlyFile> file, uint64_t size) : file_(std::move(file)), size_(size) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    return file_->read(pos, buf, static_cast<size_t>(std::min<uint64_t>(n, size_ - pos)));
  }

 private:
  std::shared_ptr<ReadOnlyFile> file_;
  uint64_t size_;
};

std::string corrupt(const fs::path& path, const std::string& why) {
  std::string msg = "corrupt checkpoint " + path.string() + ": " + why;
  std::map<int64_t, fs::path> kept = run::kept_checkpoints(path.parent_path());
  for (auto it = kept.begin(); it != kept.end();) it = it->second.filename() == path.filename() ? kept.erase(it) : ++it;
  if (!kept.empty()) {
    msg += "; the run folder keeps the earlier checkpoints of ";
    msg += run::describe_kept(kept);
    msg += ": continue from the newest with --resume-from ";
    msg += std::to_string(kept.rbegin()->first);
  }
  return msg;
}

// Verifies the trailer and the payload's CRC32C; returns the payload size, or 0 for a file
// without a trailer (version 1, checked after parsing).
uint64_t verified_payload_size(const fs::path& path, const ReadOnlyFile& file) {
  if (file.size() < kTrailerSize) return 0;
  std::array<char, kTrailerSize> t{};
  if (file.read(file.size() - kTrailerSize, t.data(), kTrailerSize) != kTrailerSize) return 0;
  if (std::memcmp(t.data(), kTrailerMagic.data(), 8) != 0) return 0;
  uint64_t payload = 0;
  uint32_t stored = 0;
  for (int i = 0; i < 8; ++i) payload |= static_cast<uint64_t>(static_cast<unsigned char>(t[8 + i])) << (8 * i);
  for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(static_cast<unsigned char>(t[16 + i])) << (8 * i);
  FP8T_INPUT_CHECK(payload + kTrailerSize == file.size(),
                   corrupt(path, "its size does not match the recorded size (truncated or extended)"));
  std::vector<char> buf(size_t{4} << 20);
  uint32_t crc = 0;
  for (uint64_t pos = 0; pos < payload;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), payload - pos));
    const size_t got = file.read(pos, buf.data(), want);
    FP8T_INPUT_CHECK(got == want, corrupt(path, "read error"));
    crc = crc32c_extend(crc, buf.data(), got);
    pos += got;
  }
  if (crc != stored) {
    char hex[64];
    std::snprintf(hex, sizeof hex, "stored 0x%08x, computed 0x%08x", stored, crc);
    FP8T_THROW(ExitCode::kBadInput, corrupt(path, std::string("checksum mismatch (CRC32C ") + hex + ")"));
  }
  return payload;
}

// The CRC32C recorded in a verified trailer (0 without one).
uint32_t stored_crc(const ReadOnlyFile& file, bool has_checksum) {
  if (!has_checksum) return 0;
  std::array<unsigned char, 4> b{};
  file.read(file.size() - kTrailerSize + 16, b.data(), 4);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
         static_cast<uint32_t>(b[3]) << 24;
}

// The tensor as it should be stored: detached, and compact when it views a larger storage.
at::Tensor storable(const at::Tensor& t) {
  at::Tensor v = t.detach();
  const bool compact = v.is_contiguous() && v.storage_offset() == 0 &&
                       v.storage().nbytes() == static_cast<size_t>(v.numel()) * v.element_size();
  return compact ? v : v.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

uint32_t save_checkpoint(const fs::path& path, const Checkpoint& ckpt) {
  c10::impl::GenericDict tensors(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : ckpt.tensors) {
    FP8T_CHECK(t.defined(), "save_checkpoint: tensor '", name, "' is undefined");
    tensors.insert(name, storable(t));
  }
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("format", std::string(kFormat));
  root.insert("version", kVersion);
  root.insert("meta", ckpt.meta.dump());
  root.insert("tensors", tensors);

  // The pickle program (small) is built in memory; tensor data is streamed into the file.
  std::vector<char> pickle_bytes;
  torch::jit::Pickler pickler(
      [&](const char* buf, size_t n) { pickle_bytes.insert(pickle_bytes.end(), buf, buf + n); });
  pickler.protocol();
  pickler.pushIValue(root);
  pickler.stop();

  uint32_t written_crc = 0;
  run::write_file_atomic(path, [&](const fs::path& tmp) {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
      const int err = errno;
      FP8T_THROW(ExitCode::kFailure, "cannot create checkpoint file ", tmp.string(), ": ",
                 std::strerror(err));
    }
    int write_err = 0;
    uint32_t crc = 0;
    uint64_t payload = 0;
    try {
      // I/O errors are recorded and reported after the writer is done: a short count would
      // make the writer throw, and again from its destructor.
      caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) -> size_t {
        if (n > 0 && write_err == 0 && std::fwrite(data, 1, n, f) != n) {
          write_err = errno != 0 ? errno : EIO;
        }
        crc = crc32c_extend(crc, data, n);
        payload += n;
        return n;
      });
      torch::jit::writeArchiveAndTensors("data", pickle_bytes.data(), pickle_bytes.size(),
                                         pickler.tensorData(), writer);
      writer.writeEndOfFile();
      written_crc = crc;
      const std::array<char, kTrailerSize> trailer = make_trailer(payload, crc);
      if (write_err == 0 && std::fwrite(trailer.data(), 1, trailer.size(), f) != trailer.size()) {
        write_err = errno != 0 ? errno : EIO;
      }
    } catch (const c10::Error& e) {
      std::fclose(f);
      FP8T_THROW(ExitCode::kFailure, "cannot write checkpoint ", path.string(), ": ",
                 e.what_without_backtrace());
    }
    const bool flushed = std::fflush(f) == 0;
    if (!flushed && write_err == 0) write_err = errno;
    if (std::fclose(f) != 0 && write_err == 0) write_err = errno;
    if (write_err != 0) {
      FP8T_THROW(ExitCode::kFailure, "cannot write checkpoint ", path.string(), ": ",
                 std::strerror(write_err));
    }
  });
  return written_crc;
}

Checkpoint load_checkpoint(const fs::path& path) {
  std::error_code ec;
  FP8T_INPUT_CHECK(fs::exists(path, ec), "checkpoint ", path.string(), " does not exist");
  FP8T_INPUT_CHECK(fs::is_regular_file(path, ec), "checkpoint ", path.string(),
                   " is not a regular file");

  auto file = std::make_shared<ReadOnlyFile>(path);
  uint64_t payload = verified_payload_size(path, *file);
  const bool has_checksum = payload > 0;
  if (!has_checksum) payload = file->size();

  c10::IValue root;
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<PayloadAdapter>(file, payload));
    root = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                             /*type_resolver=*/std::nullopt,
                                             /*obj_loader=*/std::nullopt,
                                             /*device=*/at::Device(at::kCPU), reader);
  } catch (const c10::Error& e) {
    FP8T_THROW(ExitCode::kBadInput, corrupt(path, std::string("not a readable checkpoint (") +
                                                    e.what_without_backtrace() + ")"));
  } catch (const std::exception& e) {
    FP8T_THROW(ExitCode::kBadInput, corrupt(path, std::string("not a readable checkpoint (") + e.what() + ")"));
  }

  const std::string bad = "checkpoint " + path.string() + " is not an fp8train checkpoint";
  FP8T_INPUT_CHECK(root.isGenericDict(), bad, " (no top-level dict)");
  const c10::impl::GenericDict dict = root.toGenericDict();
  auto field = [&](const char* key) -> c10::IValue {
    FP8T_INPUT_CHECK(dict.contains(key), bad, " (no '", key, "' entry)");
    return dict.at(key);
  };
  const c10::IValue format = field("format");
  FP8T_INPUT_CHECK(format.isString() && format.toStringRef() == kFormat, bad,
                   " (wrong 'format' entry)");
  const c10::IValue version = field("version");
  FP8T_INPUT_CHECK(version.isInt(), bad, " ('version' is not an integer)");
  FP8T_INPUT_CHECK(version.toInt() >= kOldestVersion && version.toInt() <= kVersion, "checkpoint ", path.string(),
                   " has version ", version.toInt(), "; this fp8train reads versions ", kOldestVersion, " to ",
                   kVersion);
  // From version 2 on the trailer is part of the format: its absence means damage.
  FP8T_INPUT_CHECK(has_checksum || version.toInt() < 2, corrupt(path, "the checksum trailer is missing"));
  if (!has_checksum) spdlog::warn("checkpoint {} predates checksums: its contents are not verified", path.string());

  Checkpoint out;
  out.crc32c = stored_crc(*file, has_checksum);
  const c10::IValue meta = field("meta");
  FP8T_INPUT_CHECK(meta.isString(), bad, " ('meta' is not a string)");
  try {
    out.meta = nlohmann::json::parse(meta.toStringRef());
  } catch (const nlohmann::json::exception& e) {
    FP8T_THROW(ExitCode::kBadInput, "checkpoint ", path.string(), " has corrupt metadata: ",
               e.what());
  }
  const c10::IValue tensors = field("tensors");
  FP8T_INPUT_CHECK(tensors.isGenericDict(), bad, " ('tensors' is not a dict)");
  for (const auto& item : tensors.toGenericDict()) {
    FP8T_INPUT_CHECK(item.key().isString() && item.value().isTensor(), bad,
                     " ('tensors' holds a non-tensor entry)");
    out.tensors.emplace(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

}  // namespace fp8t::checkpoint
