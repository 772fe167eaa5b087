#include "lib/util/log.h"

#include <spdlog/sinks/basic_file_sink.h>    // spdlog::sinks::basic_file_sink_mt
#include <spdlog/sinks/stdout_color_sinks.h>  // spdlog::sinks::stderr_color_sink_mt
#include <spdlog/spdlog.h>                    // spdlog::logger, spdlog::set_default_logger

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

}  // namespace

void setup_logging(bool quiet, const std::string& log_file) {
  std::vector<spdlog::sink_ptr> sinks;

  auto console = std::make_shared<HookedConsoleSink>(
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic));
  console->set_pattern("%^[%l]%$ %v");
  console->set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  sinks.push_back(console);

  if (!log_file.empty()) {
    std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file;
    try {
      file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file, /*truncate=*/false);
    } catch (const spdlog::spdlog_ex& e) {
      FP8T_INPUT_CHECK(false, "cannot open log file ", log_file, " for appending: ", e.what());
    }
    file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    file->set_level(spdlog::level::debug);
    sinks.push_back(file);
  }

  // Replacing the default logger drops the previous sinks (and closes the previous file once
  // no other reference holds it).
  auto logger = std::make_shared<spdlog::logger>("fp8train", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::debug);
  logger->flush_on(spdlog::level::debug);
  spdlog::set_default_logger(logger);
}

void set_console_pre_write_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook_slot() = std::move(hook);
}

}  // namespace fp8t
