// Errors and checks: the one throwing mechanism of fp8train.
//
// Every failure becomes an fp8t::Error that carries an exit-code category and the
// source location. Only apps/fp8train/main.cpp turns an Error into a process exit code.
#pragma once

#include <sstream>    // std::ostringstream (message assembly)
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string

namespace fp8t {

// Documented process exit codes (README "Exit codes").
enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,         // internal error / unexpected condition
  kBadInput = 2,        // bad config, bad CLI flag, missing or corrupt data
  kTrainingFailed = 3,  // non-finite loss, divergence, runtime failure during training
  kInterrupted = 130,   // SIGINT / SIGTERM
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message, const char* file = nullptr, int line = 0,
        const char* func = nullptr)
      : std::runtime_error(message), code_(code) {
    if (file != nullptr) {
      std::ostringstream where;
      where << file << ":" << line << " (" << func << ")";
      where_ = where.str();
    }
  }
  ExitCode code() const { return code_; }
  // "file:line (function)" of the check that fired; empty when thrown without location.
  const std::string& where() const { return where_; }

 private:
  ExitCode code_;
  std::string where_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (void)std::initializer_list<int>{((os << args), 0)...};
  return os.str();
}
}  // namespace detail

}  // namespace fp8t

// Internal invariant: a failure here is a bug or an unsupported situation (exit 1).
#define FP8T_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      throw ::fp8t::Error(::fp8t::ExitCode::kFailure, ::fp8t::detail::concat(__VA_ARGS__),     \
                          __FILE__, __LINE__, __func__);                                       \
    }                                                                                          \
  } while (0)

// User input check: bad config, flag or data file (exit 2). The message must name the key,
// flag or file and say what is expected.
#define FP8T_INPUT_CHECK(cond, ...)                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      throw ::fp8t::Error(::fp8t::ExitCode::kBadInput, ::fp8t::detail::concat(__VA_ARGS__),    \
                          __FILE__, __LINE__, __func__);                                       \
    }                                                                                          \
  } while (0)

#define FP8T_THROW(code, ...) \
  throw ::fp8t::Error((code), ::fp8t::detail::concat(__VA_ARGS__), __FILE__, __LINE__, __func__)
