// lib/dist/launch.*: torchrun's environment -> LaunchInfo, and the errors for broken launches.
#include "lib/dist/launch.h"

#include "lib/util/error.h"  // fp8t::Error
#include "tests/catch.h"

using fp8t::dist::LaunchInfo;
using fp8t::dist::parse_launch_env;

namespace {

// The message of the bad-input error parse_launch_env throws for `env` ("" when none).
std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    parse_launch_env(env);
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("no launcher variables: a single process", "[dist]") {
  const LaunchInfo info = parse_launch_env({});
  REQUIRE_FALSE(info.launched);
  REQUIRE(info.world_size == 1);
  REQUIRE(info.rank == 0);
  REQUIRE(info.is_main());
  REQUIRE(info.describe() == "single process");
}

TEST_CASE("torchrun's variables are read", "[dist]") {
  const LaunchInfo info = parse_launch_env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                            {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29400"},
                                            {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                            {"TORCHELASTIC_RESTART_COUNT", "2"}});
  REQUIRE(info.launched);
  REQUIRE(info.rank == 3);
  REQUIRE(info.world_size == 8);
  REQUIRE(info.local_rank == 1);
  REQUIRE(info.master_addr == "10.1.2.3");
  REQUIRE(info.master_port == 29400);
  REQUIRE(info.agent_store);
  REQUIRE(info.restart_count == 2);
  REQUIRE_FALSE(info.is_main());
  REQUIRE(info.describe() == "rank 3/8 (local 1), store 10.1.2.3:29400 (launcher's store)");
}

TEST_CASE("world size 1 from a launcher still joins a process group, with defaults", "[dist]") {
  const LaunchInfo info = parse_launch_env({{"WORLD_SIZE", "1"}});
  REQUIRE(info.launched);
  REQUIRE(info.rank == 0);
  REQUIRE(info.local_rank == 0);
  REQUIRE(info.master_addr == "127.0.0.1");
  REQUIRE(info.master_port == 29500);
  REQUIRE_FALSE(info.agent_store);
  // LOCAL_RANK defaults to RANK (one node).
  REQUIRE(parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}).local_rank == 1);
}

TEST_CASE("broken launches name the variable", "[dist]") {
  CHECK_THAT(error_of({{"RANK", "0"}}), FP8T_CONTAINS("RANK is set but WORLD_SIZE is not"));
  CHECK_THAT(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
             FP8T_CONTAINS("RANK=2 is not below WORLD_SIZE=2"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "two"}}), FP8T_CONTAINS("WORLD_SIZE='two' is not"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "0"}}), FP8T_CONTAINS("WORLD_SIZE=0 must be at least 1"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
             FP8T_CONTAINS("WORLD_SIZE=2 is set but RANK is not"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), FP8T_CONTAINS("MASTER_PORT is not set"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
             FP8T_CONTAINS("MASTER_PORT=70000 is not a TCP port"));
  CHECK_THAT(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
             FP8T_CONTAINS("RANK='-1' is not a non-negative integer"));
}
