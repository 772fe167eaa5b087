// lib/dist/fingerprint.*: two ranks over Gloo compare their job descriptions; a difference stops
// both with exit 2, naming the item (and each rank's own value).
#include "lib/dist/fingerprint.h"

#include <array>   // std::array
#include <string>  // std::string
#include <vector>  // std::vector

#include "lib/util/error.h"  // fp8t::Error
#include "tests/catch.h"
#include "tests/dist/dist_test_util.h"  // run_ranks

using namespace fp8t;
using dist::FingerprintItem;

namespace {

struct Outcome {
  ExitCode code = ExitCode::kOk;
  std::string what;
};

// Both ranks check their own items; what each one raised.
std::array<Outcome, 2> check(const std::array<std::vector<FingerprintItem>, 2>& items) {
  std::array<Outcome, 2> out;
  test::run_ranks(2, std::chrono::seconds(30), [&](int rank, dist::Communicator& comm) {
    try {
      dist::check_same_on_every_rank(comm, c10::Device(c10::kCPU), items[rank]);
    } catch (const Error& e) {
      out[rank] = {e.code(), e.what()};
    }
  });
  return out;
}

const std::vector<FingerprintItem> kJob = {{"config key train.lr", "0.003"},
                                           {"config key data.train_path", "a.bin"},
                                           {"file a.bin (data.train_path)", "size 1000 B, head crc32c 0x1"}};

}  // namespace

TEST_CASE("fingerprint: FNV-1a 64 is fixed (the same on every host and build)", "[dist]") {
  REQUIRE(dist::fingerprint_hash("") == 14695981039346656037ull);
  REQUIRE(dist::fingerprint_hash("a") == 0xaf63dc4c8601ec8cull);
  REQUIRE(dist::fingerprint_hash("ab") != dist::fingerprint_hash("ba"));
}

TEST_CASE("fingerprint: ranks with one job agree; the first difference is named on every rank", "[dist]") {
  const auto same = check({kJob, kJob});
  REQUIRE(same[0].code == ExitCode::kOk);
  REQUIRE(same[1].code == ExitCode::kOk);

  auto lr = kJob;
  lr[0].value = "0.001";
  const auto differ = check({kJob, lr});
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << differ[r].what);
    REQUIRE(differ[r].code == ExitCode::kBadInput);
    REQUIRE_THAT(differ[r].what, FP8T_CONTAINS("config key train.lr differs between the ranks"));
  }
  REQUIRE_THAT(differ[0].what, FP8T_CONTAINS("rank 0: 0.003"));
  REQUIRE_THAT(differ[1].what, FP8T_CONTAINS("rank 1: 0.001"));

  // Same path, other content (another node's copy of the file): the file is named.
  auto file = kJob;
  file[2].value = "size 1000 B, head crc32c 0x2";
  const auto content = check({kJob, file});
  REQUIRE(content[0].code == ExitCode::kBadInput);
  REQUIRE_THAT(content[1].what, FP8T_CONTAINS("file a.bin (data.train_path) differs"));
}

TEST_CASE("fingerprint: ranks that see different numbers of files stop with both counts", "[dist]") {
  auto more = kJob;
  more.push_back({"file b.bin (data.train_path)", "size 5 B"});
  const auto out = check({kJob, more});
  for (int r = 0; r < 2; ++r) {
    INFO(out[r].what);
    REQUIRE(out[r].code == ExitCode::kBadInput);
    REQUIRE_THAT(out[r].what, FP8T_CONTAINS("do not train the same thing"));
  }
  REQUIRE_THAT(out[0].what, FP8T_CONTAINS("rank 0 has 3 config keys and data files, another rank 4"));
  REQUIRE_THAT(out[1].what, FP8T_CONTAINS("b.bin"));
}
