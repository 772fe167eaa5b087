#include "lib/util/log.h"

#include <unistd.h>  // getpid

#include <chrono>      // std::chrono::milliseconds
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream, std::ofstream
#include <regex>       // std::regex_search
#include <thread>      // std::this_thread::sleep_for
#include <vector>      // std::vector

#include <spdlog/sinks/sink.h>  // spdlog::sinks::sink
#include <spdlog/spdlog.h>      // spdlog::default_logger, spdlog::debug

#include "lib/util/error.h"
#include "lib/util/timer.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"  // TempDir::remove_tree

namespace fs = std::filesystem;

namespace {

struct LogDir {
  fs::path path = fs::temp_directory_path() / ("fp8t_test_log_" + std::to_string(::getpid()));
  LogDir() {
    fp8t::test::TempDir::remove_tree(path);
    fs::create_directories(path);
  }
  ~LogDir() {
    fp8t::setup_logging(false, "");  // release the files and restore the console-only logger
    fp8t::test::TempDir::remove_tree(path);
  }
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("setup_logging appends timestamped debug lines to the log file", "[util]") {
  LogDir dir;
  const fs::path file = dir.path / "train.log";
  std::ofstream(file) << "earlier run\n";
  fp8t::setup_logging(/*quiet=*/false, file.string());

  auto sinks = spdlog::default_logger()->sinks();
  REQUIRE(sinks.size() == 2);
  REQUIRE(sinks[0]->level() == spdlog::level::info);   // console
  REQUIRE(sinks[1]->level() == spdlog::level::debug);  // file
  spdlog::debug("debug detail {}", 42);

  const std::string text = read_all(file);  // flushed per message
  REQUIRE(text.rfind("earlier run\n", 0) == 0);
  REQUIRE(std::regex_search(
      text, std::regex(R"(\n\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] \[debug\] debug detail 42\n)")));
}

TEST_CASE("setup_logging quiet shows warnings only, without a file", "[util]") {
  LogDir dir;
  fp8t::setup_logging(/*quiet=*/true, "");
  auto sinks = spdlog::default_logger()->sinks();
  REQUIRE(sinks.size() == 2);  // the console and the hold for a later log file
  REQUIRE(sinks[0]->level() == spdlog::level::warn);
  REQUIRE_FALSE(sinks[0]->should_log(spdlog::level::info));
  REQUIRE(sinks[0]->should_log(spdlog::level::err));
}

TEST_CASE("a second setup_logging call replaces the sinks", "[util]") {
  LogDir dir;
  const fs::path a = dir.path / "a.log";
  const fs::path b = dir.path / "b.log";
  fp8t::setup_logging(true, a.string());
  spdlog::debug("first");
  fp8t::setup_logging(true, b.string());
  spdlog::debug("second");
  REQUIRE(spdlog::default_logger()->sinks().size() == 2);
  const std::string ta = read_all(a);
  const std::string tb = read_all(b);
  REQUIRE(ta.find("first") != std::string::npos);
  REQUIRE(ta.find("second") == std::string::npos);
  REQUIRE(tb.find("second") != std::string::npos);
  REQUIRE(tb.find("first") == std::string::npos);
}

TEST_CASE("setup_logging names a log file it cannot open", "[util]") {
  LogDir dir;
  std::ofstream(dir.path / "plain") << "x";
  const std::string bad = (dir.path / "plain" / "train.log").string();  // under a regular file
  try {
    fp8t::setup_logging(false, bad);
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS(bad));
  }
}

TEST_CASE("the first log file receives what was logged before it, in order", "[util]") {
  LogDir dir;
  fp8t::setup_logging(/*quiet=*/true, "");  // a fresh hold only after a file: start from one
  const fs::path warmup = dir.path / "warmup.log";
  fp8t::setup_logging(true, warmup.string());
  fp8t::setup_logging(/*quiet=*/true, "");
  spdlog::info("config summary");
  fp8t::log_to_file("step 1/2 | loss 1.0");  // console-only text, recorded for the file
  fp8t::setup_logging(/*quiet=*/false, "");  // a second setup without a file keeps holding
  spdlog::debug("rewrite report");
  const fs::path file = dir.path / "train.log";
  fp8t::setup_logging(/*quiet=*/true, file.string());
  fp8t::log_to_file("step 2/2 | loss 0.5");
  spdlog::info("completed");

  const std::string text = read_all(file);
  const std::vector<std::string> expected = {"[info] config summary", "[info] step 1/2 | loss 1.0",
                                             "[debug] rewrite report", "[info] step 2/2 | loss 0.5",
                                             "[info] completed"};
  size_t at = 0;
  for (const auto& e : expected) {
    const size_t found = text.find(e, at);
    INFO(e << " in order in:\n" << text);
    REQUIRE(found != std::string::npos);
    at = found + e.size();
  }
  REQUIRE(read_all(warmup).find("config summary") == std::string::npos);
}

TEST_CASE("a log file opened after another one does not repeat its lines", "[util]") {
  LogDir dir;
  const fs::path a = dir.path / "a.log";
  const fs::path b = dir.path / "b.log";
  fp8t::setup_logging(true, a.string());
  spdlog::info("only in a");
  fp8t::setup_logging(true, "");
  spdlog::info("held for b");
  fp8t::setup_logging(true, b.string());
  const std::string tb = read_all(b);
  REQUIRE(tb.find("only in a") == std::string::npos);
  REQUIRE(tb.find("held for b") != std::string::npos);
}

TEST_CASE("Stopwatch measures elapsed and lap time", "[util]") {
  fp8t::Stopwatch sw;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double lap1 = sw.lap();
  REQUIRE(lap1 >= 0.02);
  REQUIRE(sw.lap() < lap1);  // a new lap started
  REQUIRE(sw.seconds() >= 0.02);
  REQUIRE(sw.millis() >= 20.0);
  sw.reset();
  REQUIRE(sw.seconds() < 0.02);
}
