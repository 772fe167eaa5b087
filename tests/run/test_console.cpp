#include "lib/run/console.h"

#include <cmath>   // NAN
#include <cstdio>  // std::tmpfile

#include <spdlog/spdlog.h>  // spdlog::info, spdlog::warn

#include "lib/util/log.h"  // setup_logging
#include "tests/catch.h"

using fp8t::run::format_count;
using fp8t::run::format_duration;
using fp8t::run::format_status;
using fp8t::run::StatusFields;
using fp8t::run::StatusLine;

namespace {

// Everything written to `f` so far.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  std::fseek(f, 0, SEEK_END);
  return s;
}

StatusFields fields(int64_t step) {
  StatusFields f;
  f.step = step;
  f.total_steps = 300;
  f.loss = 1.23454;
  f.lr = 2.1e-3;
  return f;
}

}  // namespace

TEST_CASE("format_duration prints m:ss under an hour and h:mm:ss above", "[run]") {
  REQUIRE(format_duration(0) == "0:00");
  REQUIRE(format_duration(32) == "0:32");
  REQUIRE(format_duration(59.6) == "1:00");
  REQUIRE(format_duration(754) == "12:34");
  REQUIRE(format_duration(3725) == "1:02:05");
  REQUIRE(format_duration(36000) == "10:00:00");
  REQUIRE(format_duration(-1) == "?");
  REQUIRE(format_duration(NAN) == "?");
}

TEST_CASE("format_count uses k/M/G suffixes with three significant digits", "[run]") {
  REQUIRE(format_count(0) == "0");
  REQUIRE(format_count(950) == "950");
  REQUIRE(format_count(999.96) == "1.00k");
  REQUIRE(format_count(1234) == "1.23k");
  REQUIRE(format_count(45210) == "45.2k");
  REQUIRE(format_count(999400) == "999k");
  REQUIRE(format_count(999600) == "1.00M");
  REQUIRE(format_count(1.5e6) == "1.50M");
  REQUIRE(format_count(2.25e9) == "2.25G");
  REQUIRE(format_count(INFINITY) == "?");
}

TEST_CASE("format_status joins the fields, omitting absent ones", "[run]") {
  StatusFields f = fields(120);
  REQUIRE(format_status(f) == "step 120/300 | loss 1.2345 | lr 2.10e-03");
  f.grad_norm = 0.834;
  f.tokens_per_sec = 45210;
  f.eta_seconds = 32;
  REQUIRE(format_status(f) ==
          "step 120/300 | loss 1.2345 | lr 2.10e-03 | gnorm 0.83 | 45.2k tok/s | ETA 0:32");
}

TEST_CASE("StatusLine prints plain lines off a terminal and nothing when quiet", "[run]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    StatusLine line(/*quiet=*/false, f);  // a file is not a terminal
    REQUIRE(line.mode() == StatusLine::Mode::kPlain);
    line.update(fields(1));
    line.update(fields(2));
    line.print("eval loss 2.0000");
    line.finish();
  }
  REQUIRE(contents(f) ==
          "step 1/300 | loss 1.2345 | lr 2.10e-03\n"
          "step 2/300 | loss 1.2345 | lr 2.10e-03\n"
          "eval loss 2.0000\n");
  std::fclose(f);

  f = std::tmpfile();
  {
    StatusLine quiet(/*quiet=*/true, f);
    REQUIRE(quiet.mode() == StatusLine::Mode::kQuiet);
    quiet.update(fields(1));
    quiet.print("eval");
    quiet.finish();
  }
  REQUIRE(contents(f).empty());
  std::fclose(f);
}

TEST_CASE("StatusLine in place rewrites one line and finish() ends it", "[run]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    StatusLine line(StatusLine::Mode::kInPlace, f);
    line.update(fields(1));
    line.update(fields(2));
    REQUIRE(contents(f) ==
            "\rstep 1/300 | loss 1.2345 | lr 2.10e-03\033[K"
            "\rstep 2/300 | loss 1.2345 | lr 2.10e-03\033[K");
    line.print("eval");  // clears the progress line, then a permanent line
    line.update(fields(3));
    line.finish();
    line.finish();  // idempotent
  }
  REQUIRE(contents(f) ==
          "\rstep 1/300 | loss 1.2345 | lr 2.10e-03\033[K"
          "\rstep 2/300 | loss 1.2345 | lr 2.10e-03\033[K"
          "\r\033[Keval\n"
          "\rstep 3/300 | loss 1.2345 | lr 2.10e-03\033[K\n");
  std::fclose(f);
}

TEST_CASE("a log message clears an in-place status line first", "[run]") {
  fp8t::setup_logging(/*quiet=*/true, "");  // console shows warnings only
  std::FILE* f = std::tmpfile();
  {
    StatusLine line(StatusLine::Mode::kInPlace, f);
    line.update(fields(1));
    spdlog::info("below the console level: does not touch the status line");
    REQUIRE(contents(f) == "\rstep 1/300 | loss 1.2345 | lr 2.10e-03\033[K");
    spdlog::warn("(expected test output) a warning clears the status line");
    REQUIRE(contents(f) == "\rstep 1/300 | loss 1.2345 | lr 2.10e-03\033[K\r\033[K");
    line.finish();  // nothing on screen any more: no extra newline
    REQUIRE(contents(f) == "\rstep 1/300 | loss 1.2345 | lr 2.10e-03\033[K\r\033[K");
  }
  // Once the StatusLine is gone, logging no longer calls into it.
  spdlog::warn("(expected test output) a warning after the status line is gone");
  std::fclose(f);
  fp8t::setup_logging(/*quiet=*/false, "");
}
