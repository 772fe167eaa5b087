// Logging setup: the spdlog default logger is the one logger of fp8train.
//
// Code logs with spdlog::info/warn/error/debug. setup_logging() (re)installs the sinks:
//   - console: stderr, level info (warn when quiet), pattern "[level] message";
//   - file (when log_file is not empty): appended to, level debug, every line timestamped
//     "[YYYY-mm-dd HH:MM:SS.mmm] [level] message", flushed per message.
// It may be called again at any time (e.g. once the run folder exists); the new sinks replace
// the previous ones and the previous log file is closed.
//
// The log file holds everything the console showed, in order, even what was logged before the
// file could be opened: until a file is installed, every message (at debug level) is also kept
// in memory, and the first file installed receives those messages first, with their original
// timestamps. So a run's train.log starts with the config, data and model summary and the FP8
// rewrite report logged before its run folder existed. Console-only text (the progress line of
// lib/run/console.h) reaches the file through log_to_file(), once per update, without its
// terminal redraws.
//
// Log with <spdlog/spdlog.h> directly; the build puts the OS fmt ahead of LibTorch's bundled
// copy (cmake/Dependencies.cmake, fmt shim).
#pragma once

#include <functional>  // std::function
#include <string>      // std::string

namespace fp8t {

// Installs the default logger. Throws fp8t::Error (kBadInput, naming the file) when log_file
// cannot be opened for appending. With a log_file, the messages held since the last file was
// closed (or since the start) are written to it first; without one, holding starts (again).
void setup_logging(bool quiet, const std::string& log_file);

// Records `line` (level info) in the log file, or among the held messages while there is no
// file, but not on the console: for text that a console-only writer already printed.
void log_to_file(const std::string& line);

// A hook run before each console log message is written (under the logger's lock), or an
// empty function to remove it. The console status line (lib/run/console.h) uses it to
// clear an in-place progress line so that log messages start on a clean line.
void set_console_pre_write_hook(std::function<void()> hook);

}  // namespace fp8t
