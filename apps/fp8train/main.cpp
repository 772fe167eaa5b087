// fp8train: parse the command line, run the chosen command, map errors to exit codes.
//
// Exit codes: 0 success, 1 internal error, 2 bad config/flag/data, 3 training failure
// (non-finite loss), 130 interrupted (a checkpoint was saved first).
#include <CLI/CLI.hpp>      // CLI::App
#include <spdlog/spdlog.h>  // spdlog::error

#include <cstdio>     // std::fprintf
#include <exception>  // std::exception

#include "apps/fp8train/commands.h"  // add_*_command
#include "lib/config/fp8_recipe_fields.h"  // fp8::recipe_names
#include "lib/util/error.h"          // fp8t::Error
#include "lib/util/log.h"            // setup_logging
#include "lib/util/versions.h"       // fp8train_version, runtime_versions

int main(int argc, char** argv) {
  CLI::App app{"fp8train: train GPT- and LLaMA-style transformers in FP8\n"
               "(recipes: " + fp8t::fp8::recipe_names() + "; fp32, bf16 and fp16 too),\n"
               "emulated on a CPU or on NVIDIA GPUs with cuBLASLt FP8 GEMMs.\n"
               "Run `fp8train --config configs/default.yaml` (FP8, delayed scaling); every config key can be\n"
               "overridden with a flag or --set section.key=value. --quiet silences the progress, not the result:\n"
               "warnings, errors and the final line (status, losses, run folder) still print. Exit codes: 0 ok,\n"
               "1 internal error, 2 bad input, 3 training failed, 130 interrupted.",
               "fp8train"};
  app.set_version_flag("--version", [] {
    return "fp8train " + fp8t::fp8train_version() + "\n" + fp8t::runtime_versions();
  });
  fp8t::app::add_train_command(app);
  fp8t::app::add_bench_command(app);
  fp8t::app::add_bench_gemm_command(app);
  fp8t::app::add_report_command(app);
  fp8t::app::add_export_command(app);
  fp8t::app::add_eval_command(app);
  try {
    fp8t::setup_logging(/*quiet=*/false, "");  // messages (and errors) on stderr from the start
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too (exit code 0).
    const int code = app.exit(e);
    return code == 0 ? 0 : static_cast<int>(fp8t::ExitCode::kBadInput);
  } catch (const fp8t::Error& e) {
    // An error quotes what it was given; a 50 MB value must not become 50 MB of terminal output.
    // The longest message meant to be read whole, the memory refusal with the planner's table,
    // runs to about 3,000 characters.
    const std::string message = e.what();
    constexpr size_t kMaxMessage = 8000;
    if (message.size() <= kMaxMessage) {
      spdlog::error("{}", message);
    } else {
      spdlog::error("{}... ({} more characters)", message.substr(0, kMaxMessage), message.size() - kMaxMessage);
    }
    spdlog::debug("raised at {}", e.where());
    return static_cast<int>(e.code());
  } catch (const c10::Error& e) {
    spdlog::error("LibTorch error: {}", e.what_without_backtrace());
    return static_cast<int>(fp8t::ExitCode::kFailure);
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return static_cast<int>(fp8t::ExitCode::kFailure);
  }
}
