#include "lib/data/data_file.h"

#include <string>  // std::string
#include <vector>  // std::vector

#include "tests/catch.h"
#include "tests/data/data_test_checks.h"
#include "tests/data/data_test_files.h"

using fp8t::data::expand_data_paths;
using fp8t::data::testing::require_bad_input;
using fp8t::data::testing::ScratchDir;
using fp8t::data::testing::write_text;

TEST_CASE("data paths: lists keep their order, globs expand sorted, literal names win", "[data]") {
  ScratchDir dir;
  for (const char* name : {"s_002.bin", "s_000.bin", "s_001.bin", "val.bin", "odd[1].bin"}) write_text(dir.file(name), "xy");
  using Paths = std::vector<std::string>;
  CHECK(expand_data_paths({dir.file("val.bin"), dir.file("s_001.bin")}, "data.train_path") ==
        Paths{dir.file("val.bin"), dir.file("s_001.bin")});
  CHECK(expand_data_paths({dir.file("s_*.bin")}, "data.train_path") ==
        Paths{dir.file("s_000.bin"), dir.file("s_001.bin"), dir.file("s_002.bin")});
  CHECK(expand_data_paths({dir.file("val.bin"), dir.file("s_00[02].bin")}, "k") ==
        Paths{dir.file("val.bin"), dir.file("s_000.bin"), dir.file("s_002.bin")});
  // An existing file is itself even when its name holds glob characters ("[1]" would match "1").
  CHECK(expand_data_paths({dir.file("odd[1].bin")}, "k") == Paths{dir.file("odd[1].bin")});
  // A missing literal path is passed on: opening it names it (checked_file_size).
  CHECK(expand_data_paths({dir.file("missing.bin")}, "k") == Paths{dir.file("missing.bin")});
}

TEST_CASE("data paths: a glob that matches nothing and a file named twice are bad input", "[data]") {
  ScratchDir dir;
  write_text(dir.file("a.bin"), "xy");
  require_bad_input([&] { expand_data_paths({dir.file("nothing_*.bin")}, "data.train_path"); },
                    {"data.train_path", dir.file("nothing_*.bin"), "matches no file"});
  require_bad_input([&] { expand_data_paths({dir.file("a.bin"), dir.file("*.bin")}, "data.val_path"); },
                    {"data.val_path", dir.file("a.bin"), "named twice"});
}
