// The console progress line of a training run, e.g.
//   step 120/300 | loss 1.2345 | lr 2.10e-03 | gnorm 0.83 | 45.2k tok/s | ETA 0:32
//
// On a terminal (isatty) the line is rewritten in place ("\r", text, clear-to-end-of-line) and
// cut to the terminal width; log messages written meanwhile (lib/util/log.h) first clear it.
// Elsewhere (pipes, files, CI) each update is one plain line. Quiet mode prints no progress:
// errors and warnings still reach stderr through the logger, which StatusLine does not touch,
// and the run's result line (print_result) prints all the same.
// Every update() and print() is also recorded once in the log file (log_to_file in
// lib/util/log.h), quiet or not, without the redraws.
#pragma once

#include <cstdint>   // int64_t
#include <cstdio>    // std::FILE
#include <mutex>     // std::mutex
#include <optional>  // std::optional
#include <string>    // std::string

namespace fp8t::run {

struct StatusFields {
  int64_t step = 0;         // printed as given ("step <step>/<total_steps>")
  int64_t total_steps = 0;
  double loss = 0.0;
  double lr = 0.0;
  std::optional<double> grad_norm;       // omitted when empty
  std::optional<double> tokens_per_sec;  // omitted when empty
  std::optional<double> eta_seconds;     // omitted when empty
  // A mixture of experts: the least balanced layer's tokens per expert since the last line,
  // printed "experts max/mean 1.42 (h3)": its most loaded expert over the mean. Omitted when empty.
  std::optional<double> expert_max_over_mean;
  std::string expert_layer;
};

// "step 120/300 | loss 1.2345 | lr 2.10e-03 | gnorm 0.83 | 45.2k tok/s | ETA 0:32"
std::string format_status(const StatusFields& f);

// Seconds as "m:ss" below an hour, else "h:mm:ss" (rounded to whole seconds): 32 -> "0:32",
// 3725 -> "1:02:05". Negative or non-finite: "?".
std::string format_duration(double seconds);

// A count with a k/M/G suffix and 3 significant digits from 1000 on: 950 -> "950",
// 45210 -> "45.2k", 1.5e6 -> "1.50M", 2.25e9 -> "2.25G". Non-finite: "?".
std::string format_count(double value);

class StatusLine {
 public:
  enum class Mode { kInPlace, kPlain, kQuiet };

  // quiet -> kQuiet; else kInPlace when `out` is a terminal, kPlain otherwise.
  explicit StatusLine(bool quiet, std::FILE* out = stdout);
  StatusLine(Mode mode, std::FILE* out);
  ~StatusLine();
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  // Shows the progress line (in place, or as a new line).
  void update(const StatusFields& fields);
  // The same for a progress line of another kind (e.g. an evaluation's batches).
  void update(const std::string& line);

  // Prints a line that stays (e.g. an eval result): clears an in-place line first. Nothing in
  // quiet mode.
  void print(const std::string& line);

  // Ends an in-place line with a newline so that later output starts on a clean line.
  // Idempotent; also done by the destructor.
  void finish();

  Mode mode() const { return mode_; }

 private:
  void clear_locked();  // clears an in-place line; caller holds mutex_
  void write_locked(const std::string& text);

  Mode mode_;
  std::FILE* out_;
  std::mutex mutex_;
  bool showing_ = false;  // an in-place line is on screen, without its newline
  bool hooked_ = false;   // installed the logger's pre-write hook
};

// The line that ends a run (status, losses, run folder): on stderr as "[info] <line>", as the
// logger prints it, and in the log file; also in quiet mode, which silences progress, not the
// result.
void print_result(const std::string& line, bool quiet);

}  // namespace fp8t::run
