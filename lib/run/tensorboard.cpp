#include "lib/run/tensorboard.h"

#include <unistd.h>  // gethostname, getpid

#include <chrono>   // std::chrono::system_clock
#include <cmath>    // std::isfinite

#include "lib/run/tensorboard/event_encoder.h"  // tensorboard::encode_*
#include "lib/util/crc32c.h"                    // crc32c
#include "lib/util/error.h"                     // FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::run {
namespace {

void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

void add_if_number(std::vector<std::pair<std::string, float>>& out, const std::string& tag, const nlohmann::json& v) {
  if (v.is_number() && std::isfinite(v.get<double>())) out.emplace_back(tag, static_cast<float>(v.get<double>()));
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = fp8t::crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le(out, data.size(), 8);
  append_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  append_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::vector<std::pair<std::string, float>> tensorboard_scalars(const nlohmann::json& row,
                                                               std::optional<double> peak_memory_bytes) {
  std::vector<std::pair<std::string, float>> out;
  for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "val_loss"}) {
    if (row.contains(key)) add_if_number(out, key, row[key]);
  }
  if (peak_memory_bytes) add_if_number(out, "peak_memory_bytes", *peak_memory_bytes);
  if (row.contains("fp8") && row["fp8"].is_array()) {
    for (const auto& s : row["fp8"]) {
      if (!s.is_object() || !s.contains("slot") || !s["slot"].is_string()) continue;
      const std::string prefix = "fp8/" + s["slot"].get<std::string>() + "/";
      for (const char* key : {"amax", "scale", "saturated", "underflow"}) {
        if (s.contains(key)) add_if_number(out, prefix + key, s[key]);
      }
    }
  }
  return out;
}

bool TensorBoardWriter::available() { return tensorboard::encoder_available(); }

void check_tensorboard_available(bool wanted) {
  FP8T_INPUT_CHECK(!wanted || TensorBoardWriter::available(),
                   "run.tensorboard (--tensorboard): this fp8train was built without protobuf, so it cannot write "
                   "TensorBoard files; install libprotobuf-dev and protobuf-compiler (scripts/setup.sh does) and "
                   "rebuild, or leave run.tensorboard off");
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir, int64_t start_step) {
  check_tensorboard_available(true);
  const double t = now_seconds();
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host_name() + "." +
                 std::to_string(::getpid()) + ".fp8train");
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) FP8T_THROW(ExitCode::kFailure, "cannot create the TensorBoard file ", path_.string());
  write_record(tensorboard::encode_file_version(t));
  if (start_step > 0) write_record(tensorboard::encode_session_start(t, start_step));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::write_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  if (values.empty()) return;
  write_record(tensorboard::encode_scalars(now_seconds(), step, values));
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string record = frame_record(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    FP8T_THROW(ExitCode::kFailure, "cannot write the TensorBoard file ", path_.string());
  }
}

}  // namespace fp8t::run
