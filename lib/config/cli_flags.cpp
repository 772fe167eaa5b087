// The config flags: each occurrence appends an Override at once (trigger_on_parse), so the
// overrides keep command-line order.
#include "lib/config/cli_flags.h"

#include <cctype>  // std::isdigit

#include "lib/config/fields.h"  // find_field, Field
#include "lib/util/error.h"     // FP8T_THROW, FP8T_CHECK

namespace fp8t {
namespace config {
namespace {

// The value placeholder shown by --help.
std::string value_name(const Field& f) {
  switch (f.type) {
    case FieldType::kBool: return "BOOL";
    case FieldType::kInt: return "INT";
    case FieldType::kUInt: return "UINT";
    case FieldType::kFloat: return "FLOAT";
    case FieldType::kString: return "TEXT";
    case FieldType::kEnum: return f.type_name();
    case FieldType::kGemmFlags: return "FPROP,DGRAD,WGRAD";
    case FieldType::kStringList: return "NAME,...";
  }
  return "VALUE";
}

// A value that is really the next flag (`--run-name --overwrite`, e.g. from an empty $NAME in a
// sweep script) is refused instead of becoming the value. Negative numbers ("-2") stay values.
void require_value(const std::string& flag, const std::string& key, const std::string& v) {
  const bool looks_like_flag = v.size() >= 2 && v[0] == '-' && !(std::isdigit(static_cast<unsigned char>(v[1])) ||
                                                                  v[1] == '.');
  if (looks_like_flag) {
    FP8T_THROW(ExitCode::kBadInput, flag, " needs a value, got '", v.substr(0, 64), v.size() > 64 ? "..." : "",
               "', which looks like a flag (an empty shell variable?); if the value really starts with '-', use "
               "--set ", key, "=VALUE");
  }
}

}  // namespace

const std::vector<ConfigFlag>& config_flags() {
  static const std::vector<ConfigFlag> flags = {
      {"--precision", "precision", false},
      {"--steps", "train.steps", false},
      {"--seed", "run.seed", false},
      {"--run-name", "run.name", false},
      {"--out-dir", "run.out_dir", false},
      {"--device", "run.device", false},
      {"--fp8-recipe", "fp8.recipe", false},
      {"--fp8-margin", "fp8.margin", false},
      {"--fp8-interval", "fp8.interval", false},
      {"--fp8-format", "fp8.fp8_format", false},
      {"--fp8-amax-history-len", "fp8.amax_history_len", false},
      {"--fp8-amax-compute-algo", "fp8.amax_compute_algo", false},
      {"--fp8-amax-update", "fp8.amax_update", false},
      {"--fp8-swiglu-wgrad-copy", "fp8.swiglu_wgrad_copy", false},
      {"--fp8-override-linear-precision", "fp8.override_linear_precision", false},
      {"--fp8-stats", "fp8.stats", true},
      {"--fp8-attention", "fp8.attention", true},
      {"--zero", "dist.zero", false},
      {"--recompute", "train.recompute", false},
      {"--moments-dtype", "train.moments_dtype", false},
      {"--cuda-graphs", "train.cuda_graphs", false},
      {"--quiet", "run.quiet", true},
      {"--overwrite", "run.overwrite", true},
      {"--tensorboard", "run.tensorboard", true},
      {"--accept-data-change", "run.accept_data_change", true},
  };
  return flags;
}

Override parse_set_argument(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    FP8T_THROW(ExitCode::kBadInput, "--set: expected KEY=VALUE (e.g. --set model.n_layer=4), got '", text, "'");
  }
  std::string key = text.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  while (!key.empty() && key.front() == ' ') key.erase(key.begin());
  if (key.empty()) FP8T_THROW(ExitCode::kBadInput, "--set: missing key before '=' in '", text, "'; expected KEY=VALUE");
  return Override{key, text.substr(eq + 1), "--set"};
}

void add_config_flags(CLI::App& app, std::vector<Override>* out) {
  FP8T_CHECK(out != nullptr, "add_config_flags: no output vector");
  CLI::Option_group* group = app.add_option_group(
      "Experiment config", "Override keys of the experiment file; later flags win over earlier ones");
  for (const ConfigFlag& cf : config_flags()) {
    const Field* f = find_field(cf.key);
    FP8T_CHECK(f != nullptr, "config flag ", cf.flag, " names unknown key ", cf.key);
    const std::string help = f->help + " [" + cf.key + "]";
    if (cf.is_switch) {
      group->add_flag_callback(cf.flag, [out, cf] { out->push_back(Override{cf.key, "true", cf.flag}); }, help)
          ->trigger_on_parse();
    } else {
      group
          ->add_option_function<std::string>(
              cf.flag,
              [out, cf](const std::string& v) {
                require_value(cf.flag, cf.key, v);
                out->push_back(Override{cf.key, v, cf.flag});
              },
              help)
          ->type_name(value_name(*f))
          ->trigger_on_parse();
    }
  }
  group
      ->add_option_function<std::string>(
          "--set",
          [out](const std::string& v) {
            require_value("--set", "KEY", v);
            out->push_back(parse_set_argument(v));
          },
          "Set any key of the experiment file, e.g. --set model.n_layer=4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->trigger_on_parse();
}

}  // namespace config
}  // namespace fp8t
