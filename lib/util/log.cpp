#include "lib/util/log.h"

#include <spdlog/details/log_msg_buffer.h>    // spdlog::details::log_msg_buffer
#include <spdlog/sinks/base_sink.h>           // spdlog::sinks::base_sink
#include <spdlog/sinks/basic_file_sink.h>     // spdlog::sinks::basic_file_sink_mt
#include <spdlog/sinks/stdout_color_sinks.h>  // spdlog::sinks::stderr_color_sink_mt
#include <spdlog/spdlog.h>                    // spdlog::logger, spdlog::set_default_logger

#include <atomic>  // std::atomic (a log-file error is reported once)
#include <cstdio>  // std::fprintf
#include <memory>  // std::shared_ptr, std::make_shared
#include <mutex>   // std::mutex, std::lock_guard
#include <vector>  // std::vector

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fp8t {
namespace {

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

std::function<void()>& hook_slot() {
  static std::function<void()> hook;
  return hook;
}

// Forwards to the stderr sink after running the pre-write hook (see log.h).
class HookedConsoleSink : public spdlog::sinks::sink {
 public:
  explicit HookedConsoleSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    {
      std::lock_guard<std::mutex> lock(hook_mutex());
      if (hook_slot()) hook_slot()();
    }
    inner_->log(msg);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

// Keeps the messages logged while no log file is open, for the first file that will be. A
// process that never opens one (a non-main rank, `fp8train report`) keeps at most kMaxHeld.
class HoldSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr size_t kMaxHeld = 20000;

  // Writes the held messages to `file` in order (original timestamps) and forgets them.
  void replay_into(spdlog::sinks::sink& file) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& m : held_) file.log(m);
    if (dropped_ > 0) {
      const std::string note = std::to_string(dropped_) + " earlier messages were not kept";
      file.log(spdlog::details::log_msg("fp8train", spdlog::level::warn, note));
    }
    file.flush();
    held_.clear();
    dropped_ = 0;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (held_.size() < kMaxHeld) {
      held_.emplace_back(msg);
    } else {
      ++dropped_;
    }
  }
  void flush_() override {}

 private:
  std::vector<spdlog::details::log_msg_buffer> held_;
  size_t dropped_ = 0;
};

// The non-console destinations of the current logger: a file, or the hold while there is none.
struct FileState {
  std::mutex mutex;
  std::shared_ptr<HoldSink> hold;
  std::shared_ptr<spdlog::sinks::sink> file;
};

FileState& file_state() {
  static FileState state;
  return state;
}

std::shared_ptr<spdlog::sinks::sink> open_log_file(const std::string& log_file) {
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file;
  try {
    file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file, /*truncate=*/false);
  } catch (const spdlog::spdlog_ex& e) {
    FP8T_INPUT_CHECK(false, "cannot open log file ", log_file, " for appending: ", e.what());
  }
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  file->set_level(spdlog::level::debug);
  return file;
}

// The file sink for `log_file` (after the held messages), or the hold sink without a file.
std::shared_ptr<spdlog::sinks::sink> file_or_hold_sink(FileState& st, const std::string& log_file) {
  if (log_file.empty()) {
    // A new hold after a file was open: what that file received is not held again.
    if (!st.hold || st.file) st.hold = std::make_shared<HoldSink>();
    st.hold->set_level(spdlog::level::debug);
    st.file.reset();
    return st.hold;
  }
  auto file = open_log_file(log_file);
  if (st.hold) st.hold->replay_into(*file);
  st.hold.reset();
  st.file = file;
  return file;
}

}  // namespace

void setup_logging(bool quiet, const std::string& log_file) {
  std::vector<spdlog::sink_ptr> sinks;

  auto console = std::make_shared<HookedConsoleSink>(
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic));
  console->set_pattern("%^[%l]%$ %v");
  console->set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  sinks.push_back(console);

  FileState& st = file_state();
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    sinks.push_back(file_or_hold_sink(st, log_file));
  }

  // Replacing the default logger drops the previous sinks (and closes the previous file once
  // no other reference holds it).
  auto logger = std::make_shared<spdlog::logger>("fp8train", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::debug);
  logger->flush_on(spdlog::level::debug);
  // A log file that cannot be written (disk full, I/O error) is said once on stderr, clearly,
  // instead of spdlog's rate-limited "LOG ERROR" per message; the run itself goes on (metrics
  // and checkpoint writes report their own failures).
  logger->set_error_handler([](const std::string& what) {
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true)) {
      std::fprintf(stderr, "fp8train: cannot write the log file (%s); further log-file errors are not reported\n",
                   what.c_str());
    }
  });
  spdlog::set_default_logger(logger);
}

void log_to_file(const std::string& line) {
  FileState& st = file_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  const spdlog::details::log_msg msg("fp8train", spdlog::level::info, line);
  if (st.file) {
    st.file->log(msg);
    st.file->flush();
  } else if (st.hold) {
    st.hold->log(msg);
  }
}

void set_console_pre_write_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook_slot() = std::move(hook);
}

}  // namespace fp8t
