// Logging setup: the spdlog default logger is the one logger of fp8train.
//
// Code logs with spdlog::info/warn/error/debug. setup_logging() (re)installs the sinks:
//   - console: stderr, level info (warn when quiet), pattern "[level] message";
//   - file (when log_file is not empty): appended to, level debug, every line timestamped
//     "[YYYY-mm-dd HH:MM:SS.mmm] [level] message", flushed per message.
// It may be called again at any time (e.g. once the run folder exists); the new sinks replace
// the previous ones and the previous log file is closed.
//
// Log with <spdlog/spdlog.h> directly; the build puts the OS fmt ahead of LibTorch's bundled
// copy (cmake/Dependencies.cmake, fmt shim).
#pragma once

#include <functional>  // std::function
#include <string>      // std::string

namespace fp8t {

// Installs the default logger. Throws fp8t::Error (kBadInput, naming the file) when log_file
// cannot be opened for appending.
void setup_logging(bool quiet, const std::string& log_file);

// A hook run before each console log message is written (under the logger's lock), or an
// empty function to remove it. The console status line (lib/train/console.h) uses it to
// clear an in-place progress line so that log messages start on a clean line.
void set_console_pre_write_hook(std::function<void()> hook);

}  // namespace fp8t
