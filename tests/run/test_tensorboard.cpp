#include "lib/run/tensorboard.h"

#include <cstring>  // std::memcpy
#include <fstream>  // std::ifstream

#include "lib/util/error.h"  // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"  // TempDir

using namespace fp8t::run;

namespace {

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

// The records of an event file, checking each one's framing.
size_t count_records(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  size_t at = 0, records = 0;
  while (at < bytes.size()) {
    uint64_t len;
    std::memcpy(&len, bytes.data() + at, 8);
    REQUIRE(le32(bytes, at + 8) == masked_crc32c(bytes.data() + at, 8));
    REQUIRE(le32(bytes, at + 12 + len) == masked_crc32c(bytes.data() + at + 12, len));
    at += 16 + len;
    ++records;
  }
  REQUIRE(at == bytes.size());
  return records;
}

}  // namespace

TEST_CASE("masked_crc32c is TFRecord's mask of the CRC-32C", "[run]") {
  // The check value of CRC-32C ("123456789" -> 0xE3069283) rotated right by 15, plus the delta.
  REQUIRE(masked_crc32c("123456789", 9) == ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u);
}

TEST_CASE("frame_record writes length, masked CRCs and the data", "[run]") {
  const std::string data = "hello event";
  const std::string rec = frame_record(data);
  REQUIRE(rec.size() == 8 + 4 + data.size() + 4);
  uint64_t len;
  std::memcpy(&len, rec.data(), 8);
  REQUIRE(len == data.size());
  REQUIRE(le32(rec, 8) == masked_crc32c(rec.data(), 8));
  REQUIRE(rec.substr(12, data.size()) == data);
  REQUIRE(le32(rec, 12 + data.size()) == masked_crc32c(data.data(), data.size()));
}

TEST_CASE("tensorboard_scalars tags a metrics row by its keys and skips non-numbers", "[run]") {
  const nlohmann::json row = {{"step", 10}, {"loss", 2.5}, {"lr", 1e-3}, {"grad_norm", nullptr},
                              {"tokens_per_s", 4e4}, {"fp8", {{{"slot", "h0.fc1.input"}, {"amax", 3.0},
                                                               {"scale", 64.0}, {"saturated", 0.0},
                                                               {"underflow", 0.25}}}}};
  const auto s = tensorboard_scalars(row, 1024.0);
  std::vector<std::string> tags;
  for (const auto& [tag, v] : s) tags.push_back(tag);
  REQUIRE(tags == std::vector<std::string>{"loss", "lr", "tokens_per_s", "peak_memory_bytes",
                                           "fp8/h0.fc1.input/amax", "fp8/h0.fc1.input/scale",
                                           "fp8/h0.fc1.input/saturated", "fp8/h0.fc1.input/underflow"});
  REQUIRE(s[0].second == 2.5f);
  REQUIRE(s[7].second == 0.25f);
}

TEST_CASE("TensorBoardWriter writes framed records, or refuses clearly without protobuf", "[run]") {
  fp8t::test::TempDir tmp("tensorboard");
  if (!TensorBoardWriter::available()) {
    REQUIRE_THROWS_AS(TensorBoardWriter(tmp.path(), 0), fp8t::Error);
    REQUIRE(fp8t::test::TempDir::list(tmp.path()).empty());
    return;
  }
  std::filesystem::path file;
  {
    TensorBoardWriter w(tmp.path(), 0);
    w.write_scalars(5, {{"loss", 1.5f}});
    w.write_scalars(6, {});  // nothing
    file = w.path();
  }
  REQUIRE(file.filename().string().rfind("events.out.tfevents.", 0) == 0);
  REQUIRE(count_records(file) == 2);  // file version + one scalar event
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(bytes.find("brain.Event:2") != std::string::npos);
  REQUIRE(bytes.find("loss") != std::string::npos);
}

TEST_CASE("a resumed run's event file starts with a session-start record", "[run]") {
  if (!TensorBoardWriter::available()) SKIP("this build has no protobuf (the refusal is tested above)");
  fp8t::test::TempDir tmp("tensorboard");
  std::filesystem::path file;
  {
    TensorBoardWriter w(tmp.path(), 40);
    file = w.path();
  }
  REQUIRE(count_records(file) == 2);  // file version + SessionLog START at step 40
}
