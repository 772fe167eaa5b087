// Validation: per-key ranges from the field table, then the rules between keys.
#include "lib/config/validate.h"

#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_arithmetic_v, std::decay_t
#include <variant>      // std::visit

#include "lib/config/fields.h"  // fields(), format_value, to_string
#include "lib/config/parse.h"   // fail
#include "lib/config/text.h"    // format_float

namespace fp8t {
namespace config {
namespace {

// "model.n_head (configs/x.yaml:7)": a key and where its value came from.
std::string named(const ConfigSources& s, const std::string& key) { return key + " (" + s.origin(key) + ")"; }

double as_number(const Value& v) {
  return std::visit(
      [](const auto& x) -> double {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_arithmetic_v<T>) {
          return static_cast<double>(x);
        } else {
          return 0.0;
        }
      },
      v);
}

std::string str(int64_t v) { return std::to_string(v); }

std::string num(double v) { return format_float(v); }

}  // namespace

void validate(const ExperimentConfig& c, const ConfigSources& s) {
  // 1. Ranges of single keys (declared in the field table).
  for (const auto& f : fields()) {
    if (!f.range) continue;
    const Value v = f.get(c);
    if (!f.range->contains(as_number(v))) {
      fail(named(s, f.key) + ": expected " + f.expected() + ", got " + format_value(f, v));
    }
  }

  // 2. Text values that must not be empty.
  const std::string& name = c.run.name;
  if (name.empty() || name == "." || name == ".." || name.find_first_of("/\\") != std::string::npos) {
    fail(named(s, "run.name") + ": expected a folder name (not empty, no '/', not '.' or '..'), got '" + name + "'");
  }
  if (c.run.out_dir.empty()) fail(named(s, "run.out_dir") + ": expected a directory, got an empty string");
  for (const auto& layer : c.fp8.skip_layers) {
    if (layer.empty()) fail(named(s, "fp8.skip_layers") + ": expected module names, got an empty name");
  }

  // Not wired yet: the FP16 AMP path (dynamic loss scaling) is under construction.
  if (c.precision == Precision::kFp16) fail(named(s, "precision") + ": fp16 is not available yet; use fp32, bf16 or fp8");

  // 3. Rules between keys.
  const auto& m = c.model;
  if (m.d_model % m.n_head != 0) {
    fail(named(s, "model.d_model") + ": " + str(m.d_model) + " is not divisible by " + named(s, "model.n_head") +
         " = " + str(m.n_head) + "; expected a multiple of model.n_head");
  }
  if ((m.d_model / m.n_head) % 2 != 0) {
    fail(named(s, "model.n_head") + ": head dimension model.d_model / model.n_head = " + str(m.d_model) + " / " +
         str(m.n_head) + " = " + str(m.d_model / m.n_head) + " is odd; expected an even head dimension");
  }
  if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0) {
    fail(named(s, "model.n_kv_head") + ": " + str(m.n_kv_head) + " does not divide " + named(s, "model.n_head") +
         " = " + str(m.n_head) + "; expected a divisor of model.n_head (grouped-query attention), or 0 for n_head");
  }
  const auto& t = c.train;
  if (t.warmup_steps > t.steps) {
    fail(named(s, "train.warmup_steps") + ": " + str(t.warmup_steps) + " is more than " + named(s, "train.steps") +
         " = " + str(t.steps) + "; expected warmup_steps <= steps (e.g. --set train.warmup_steps=" +
         str(t.steps / 10) + ")");
  }
  if (t.min_lr > t.lr) {
    fail(named(s, "train.min_lr") + ": " + num(t.min_lr) + " is above " + named(s, "train.lr") + " = " + num(t.lr) +
         "; expected min_lr <= lr");
  }
  if (t.eval_interval > 0 && t.eval_batches < 1) {
    fail(named(s, "train.eval_batches") + ": expected >= 1 while " + named(s, "train.eval_interval") + " = " +
         str(t.eval_interval) + " (set train.eval_interval to 0 to disable periodic evaluation), got " +
         str(t.eval_batches));
  }
  const auto& d = c.data;
  if (d.source != DataSource::kSynthetic && d.train_path.empty()) {
    fail(named(s, "data.train_path") + ": required when " + named(s, "data.source") + " is " + to_string(d.source) +
         "; pass --set data.train_path=PATH");
  }
  if (d.source == DataSource::kText && m.vocab_size < 256) {
    fail(named(s, "model.vocab_size") + ": " + str(m.vocab_size) + " is too small for " + named(s, "data.source") +
         " = text (one token per byte); expected >= 256");
  }
}

}  // namespace config
}  // namespace fp8t
