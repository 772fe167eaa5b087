// lib/run/checkpoint_files.*: the names of a run folder's checkpoint files and which step each
// belongs to; keeping the files of some steps removes the others' and nothing else.
#include "lib/run/checkpoint_files.h"

#include <fstream>  // std::ofstream
#include <string>   // std::string
#include <vector>   // std::vector

#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::test::TempDir;
using namespace fp8t::run;

namespace {
void touch(const std::filesystem::path& p) { std::ofstream(p) << "x"; }
}  // namespace

TEST_CASE("checkpoint files: names and the step each belongs to", "[run]") {
  REQUIRE(kept_checkpoint_name(12) == "checkpoint.step-12.pt");
  REQUIRE(checkpoint_file_step("checkpoint.step-12.pt") == 12);
  REQUIRE(checkpoint_file_step("checkpoint.shard-1-of-4.step-300.pt") == 300);  // ZeRO shards
  REQUIRE(checkpoint_file_step("checkpoint.params-0-of-8.step-7.pt") == 7);     // any other part
  for (const char* other : {"checkpoint.pt", "checkpoint.prev.pt", "checkpoint.step-.pt", "checkpoint.step-1x.pt",
                            "checkpoint.step-3.pt.bak", "mycheckpoint.step-3.pt", ".checkpoint.step-3.pt.tmp.1.0",
                            "checkpoint.shardstep-3.pt", "checkpoint.step-1234567890123456789.pt"}) {
    INFO(other);
    REQUIRE_FALSE(checkpoint_file_step(other).has_value());
  }
  REQUIRE(is_kept_checkpoint("checkpoint.step-3.pt"));
  REQUIRE_FALSE(is_kept_checkpoint("checkpoint.shard-0-of-2.step-3.pt"));
}

TEST_CASE("checkpoint files: listing and retention by step", "[run]") {
  TempDir tmp("ckpt_files");
  for (const char* f : {"checkpoint.pt", "checkpoint.step-2.pt", "checkpoint.step-4.pt", "checkpoint.step-6.pt",
                        "checkpoint.shard-0-of-2.step-4.pt", "checkpoint.shard-1-of-2.step-4.pt",
                        "checkpoint.shard-0-of-2.step-8.pt", "checkpoint.prev.pt", "notes.txt"}) {
    touch(tmp / f);
  }
  const auto kept = kept_checkpoints(tmp.path());
  REQUIRE(kept.size() == 3);
  REQUIRE(kept.begin()->first == 2);
  REQUIRE(kept.rbegin()->second == tmp / "checkpoint.step-6.pt");
  REQUIRE(describe_kept(kept) == "steps 2, 4, 6 (checkpoint.step-2.pt, checkpoint.step-4.pt, checkpoint.step-6.pt)");
  REQUIRE(describe_kept({}) == "none");

  // Keep steps 4 and 8: step 2's and 6's files go, with no other file touched.
  REQUIRE(remove_checkpoint_files_except(tmp.path(), {4, 8}) ==
          std::vector<std::string>{"checkpoint.step-2.pt", "checkpoint.step-6.pt"});
  REQUIRE(TempDir::list(tmp.path()) ==
          std::vector<std::string>{"checkpoint.prev.pt", "checkpoint.pt", "checkpoint.shard-0-of-2.step-4.pt",
                                   "checkpoint.shard-0-of-2.step-8.pt", "checkpoint.shard-1-of-2.step-4.pt",
                                   "checkpoint.step-4.pt", "notes.txt"});
  // After a --resume-from 3: the kept checkpoints of later steps go (their shards wait for retention).
  REQUIRE(remove_kept_checkpoints_after(tmp.path(), 3) == std::vector<std::string>{"checkpoint.step-4.pt"});
  REQUIRE(kept_checkpoints(tmp.path()).empty());
}
