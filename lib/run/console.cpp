#include "lib/run/console.h"

#include <sys/ioctl.h>  // ioctl, TIOCGWINSZ, winsize
#include <unistd.h>     // isatty, fileno

#include <spdlog/spdlog.h>  // spdlog::info

#include <cmath>  // std::isfinite, std::llround, std::fabs

#include "lib/util/log.h"  // set_console_pre_write_hook, log_to_file

namespace fp8t::run {
namespace {

std::string printf_string(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

// Terminal columns of `out`, or 0 when unknown.
int terminal_columns(std::FILE* out) {
  struct winsize ws {};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0) return ws.ws_col;
  return 0;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  const long long total = std::llround(seconds);
  const long long h = total / 3600;
  const long long m = (total / 60) % 60;
  const long long s = total % 60;
  char buf[48];
  if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", h, m, s);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", m, s);
  }
  return buf;
}

std::string format_count(double value) {
  if (!std::isfinite(value)) return "?";
  const double a = std::fabs(value);
  // The suffix is chosen after rounding, so 999.96 prints as "1.00k", never "1000".
  if (a < 999.5) return printf_string("%.0f", value);
  static const char* kSuffix[] = {"k", "M", "G", "T"};
  double scaled = value / 1e3;
  for (int i = 0; i < 4; ++i) {
    const double s = std::fabs(scaled);
    const bool last = i == 3;
    if (s < 9.995) return printf_string("%.2f", scaled) + kSuffix[i];
    if (s < 99.95) return printf_string("%.1f", scaled) + kSuffix[i];
    if (s < 999.5 || last) return printf_string("%.0f", scaled) + kSuffix[i];
    scaled /= 1e3;
  }
  return "?";  // not reached
}

std::string format_status(const StatusFields& f) {
  std::string s = "step " + std::to_string(f.step) + "/" + std::to_string(f.total_steps);
  s += " | loss " + printf_string("%.4f", f.loss);
  s += " | lr " + printf_string("%.2e", f.lr);
  if (f.grad_norm) s += " | gnorm " + printf_string("%.2f", *f.grad_norm);
  if (f.tokens_per_sec) s += " | " + format_count(*f.tokens_per_sec) + " tok/s";
  if (f.expert_max_over_mean) {
    s += " | experts max/mean " + printf_string("%.2f", *f.expert_max_over_mean) +
         (f.expert_layer.empty() ? "" : " (" + f.expert_layer + ")");
  }
  if (f.eta_seconds) s += " | ETA " + format_duration(*f.eta_seconds);
  return s;
}

StatusLine::StatusLine(bool quiet, std::FILE* out)
    : StatusLine(quiet                       ? Mode::kQuiet
                 : ::isatty(::fileno(out)) ? Mode::kInPlace
                                             : Mode::kPlain,
                 out) {}

StatusLine::StatusLine(Mode mode, std::FILE* out) : mode_(mode), out_(out) {
  if (mode_ == Mode::kInPlace) {
    set_console_pre_write_hook([this] {
      std::lock_guard<std::mutex> lock(mutex_);
      clear_locked();
    });
    hooked_ = true;
  }
}

StatusLine::~StatusLine() {
  // Remove the hook first (it takes mutex_ under the logger's hook lock, never the reverse).
  if (hooked_) set_console_pre_write_hook({});
  finish();
}

void StatusLine::write_locked(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
}

void StatusLine::clear_locked() {
  if (!showing_) return;
  write_locked("\r\033[K");
  showing_ = false;
}

void StatusLine::update(const StatusFields& fields) { update(format_status(fields)); }

void StatusLine::update(const std::string& text) {
  std::string line = text;
  log_to_file(line);  // once per update, also when quiet; the redraws below are console-only
  if (mode_ == Mode::kQuiet) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (mode_ == Mode::kPlain) {
    write_locked(line + "\n");
    return;
  }
  // Stay on one terminal row: a wrapped line could not be rewritten by "\r".
  const int cols = terminal_columns(out_);
  if (cols > 1 && line.size() >= static_cast<size_t>(cols)) line.resize(cols - 1);
  write_locked("\r" + line + "\033[K");
  showing_ = true;
}

void StatusLine::print(const std::string& line) {
  log_to_file(line);
  if (mode_ == Mode::kQuiet) return;
  std::lock_guard<std::mutex> lock(mutex_);
  clear_locked();
  write_locked(line + "\n");
}

void StatusLine::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!showing_) return;
  write_locked("\n");
  showing_ = false;
}

void print_result(const std::string& line, bool quiet) {
  if (!quiet) {
    spdlog::info("{}", line);
    return;
  }
  // The logger's console sink shows warnings and errors only when quiet: write around it.
  log_to_file(line);
  std::fprintf(stderr, "[info] %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace fp8t::run
