#include "lib/train/checkpoint.h"

#include <cerrno>   // errno
#include <cstdio>   // std::FILE
#include <cstring>  // std::strerror
#include <vector>   // std::vector

#include <ATen/ATen.h>                                       // at::Tensor ops
#include <caffe2/serialize/inline_container.h>               // PyTorchStreamWriter/Reader
#include <torch/csrc/jit/serialization/export.h>             // writeArchiveAndTensors
#include <torch/csrc/jit/serialization/import_read.h>        // readArchiveAndTensors
#include <torch/csrc/jit/serialization/pickler.h>            // Pickler

#include "lib/train/run_dir.h"  // write_file_atomic
#include "lib/util/error.h"     // FP8T_INPUT_CHECK, FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t::train {
namespace {

constexpr const char* kFormat = "fp8train-checkpoint";
constexpr int64_t kVersion = 1;

// The tensor as it should be stored: detached, and compact when it views a larger storage.
at::Tensor storable(const at::Tensor& t) {
  at::Tensor v = t.detach();
  const bool compact = v.is_contiguous() && v.storage_offset() == 0 &&
                       v.storage().nbytes() == static_cast<size_t>(v.numel()) * v.element_size();
  return compact ? v : v.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

void save_checkpoint(const fs::path& path, const Checkpoint& ckpt) {
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

  write_file_atomic(path, [&](const fs::path& tmp) {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
      const int err = errno;
      FP8T_THROW(ExitCode::kFailure, "cannot create checkpoint file ", tmp.string(), ": ",
                 std::strerror(err));
    }
    int write_err = 0;
    try {
      // I/O errors are recorded and reported after the writer is done: a short count would
      // make the writer throw, and again from its destructor.
      caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) -> size_t {
        if (n > 0 && write_err == 0 && std::fwrite(data, 1, n, f) != n) {
          write_err = errno != 0 ? errno : EIO;
        }
        return n;
      });
      torch::jit::writeArchiveAndTensors("data", pickle_bytes.data(), pickle_bytes.size(),
                                         pickler.tensorData(), writer);
      writer.writeEndOfFile();
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
}

Checkpoint load_checkpoint(const fs::path& path) {
  std::error_code ec;
  FP8T_INPUT_CHECK(fs::exists(path, ec), "checkpoint ", path.string(), " does not exist");
  FP8T_INPUT_CHECK(fs::is_regular_file(path, ec), "checkpoint ", path.string(),
                   " is not a regular file");

  c10::IValue root;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path.string());
    root = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                             /*type_resolver=*/std::nullopt,
                                             /*obj_loader=*/std::nullopt,
                                             /*device=*/at::Device(at::kCPU), reader);
  } catch (const c10::Error& e) {
    FP8T_THROW(ExitCode::kBadInput, "cannot read checkpoint ", path.string(),
               ": the file is corrupt or not a checkpoint (", e.what_without_backtrace(), ")");
  } catch (const std::exception& e) {
    FP8T_THROW(ExitCode::kBadInput, "cannot read checkpoint ", path.string(),
               ": the file is corrupt or not a checkpoint (", e.what(), ")");
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
  FP8T_INPUT_CHECK(version.toInt() == kVersion, "checkpoint ", path.string(), " has version ",
                   version.toInt(), "; this fp8train reads version ", kVersion);

  Checkpoint out;
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

}  // namespace fp8t::train
