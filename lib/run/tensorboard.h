// TensorBoard event files in the run folder (run.tensorboard / --tensorboard).
//
// An event file is a sequence of records, each: uint64 length, uint32 masked CRC-32C of the
// length, the serialized Event, uint32 masked CRC-32C of the data (little-endian). The Event
// messages come from lib/run/tensorboard/event_encoder.h (protobuf); the framing is here.
// The tags are the metrics.jsonl keys: loss, lr, grad_norm, tokens_per_s, val_loss,
// peak_memory_bytes, and with --fp8-stats fp8/<slot>/{amax,scale,saturated,underflow}.
// `tensorboard --logdir runs/` shows every run folder as one run.
#pragma once

#include <cstdint>     // int64_t, uint32_t
#include <cstdio>      // std::FILE
#include <filesystem>  // std::filesystem::path
#include <optional>    // std::optional
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

namespace fp8t::run {

// The masked CRC-32C of TFRecord framing: ((crc >> 15 | crc << 17) + 0xa282ead8) of the
// CRC-32C (lib/util/crc32c.h).
uint32_t masked_crc32c(const void* data, size_t size);

// One framed record (see above) around `data`.
std::string frame_record(const std::string& data);

// The scalars of one metrics.jsonl row, tagged by their metrics keys (non-numeric or
// non-finite values are left out), plus peak_memory_bytes when given.
std::vector<std::pair<std::string, float>> tensorboard_scalars(const nlohmann::json& row,
                                                               std::optional<double> peak_memory_bytes);

class TensorBoardWriter {
 public:
  // Whether this build can write event files (it was built with protobuf).
  static bool available();

  // Creates <dir>/events.out.tfevents.<unix seconds>.<host>.<pid>.fp8train and writes the
  // file-version record; with start_step > 0 (a resumed run) also a session-start record.
  // Throws fp8t::Error: kBadInput when the build has no protobuf (naming run.tensorboard and
  // how to get it), kFailure when the file cannot be created.
  TensorBoardWriter(const std::filesystem::path& dir, int64_t start_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one event with the given scalars at `step` and flushes it (nothing when empty).
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Throws the kBadInput error of a build without protobuf when `wanted` (run.tensorboard) is
// set; for checking before anything is written.
void check_tensorboard_available(bool wanted);

}  // namespace fp8t::run
