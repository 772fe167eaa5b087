// Validation: per-key ranges from the field table, then the rules between keys.
#include "lib/config/validate.h"

#include <spdlog/spdlog.h>  // spdlog::warn

#include <algorithm>    // std::any_of
#include <cstdio>       // std::snprintf
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_arithmetic_v, std::decay_t
#include <variant>      // std::visit

#include "lib/config/fields.h"              // fields(), format_value, to_string
#include "lib/config/parallel_layout.h"     // ParallelLayout
#include "lib/config/parse.h"               // fail
#include "lib/config/text.h"                // format_float
#include "lib/config/fp8_recipe_fields.h"   // recipe_fields_without_effect, why_no_effect, recipe_traits
#include "lib/config/moe_fields.h"          // check_moe_rules

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

// A value as an error message quotes it: at most 64 characters, control characters escaped.
std::string echo(const std::string& v) {
  std::string out;
  for (size_t i = 0; i < v.size() && out.size() < 64; ++i) {
    const auto ch = static_cast<unsigned char>(v[i]);
    if (ch < 0x20 || ch == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    } else {
      out += v[i];
    }
  }
  if (out.size() < v.size()) out += "...";
  return out;
}

// fp8.* keys given on the command line do nothing under another precision: say so (a warning,
// not an error, so that one sweep script can vary the precision with the same flags).
void warn_unused_fp8_flags(const ExperimentConfig& c, const ConfigSources& s) {
  if (c.precision == Precision::kFp8) return;
  for (const auto& [key, origin] : s.all()) {
    if (key.rfind("fp8.", 0) == 0 && origin.rfind("--", 0) == 0) {
      spdlog::warn("{} ({}) has no effect: precision is {}, the fp8 keys apply to precision fp8 only", key, origin,
                   to_string(c.precision));
    }
  }
}

// A recipe key without effect under fp8.recipe (lib/config/fp8_recipe_fields.h) is an error when it
// was set explicitly: by a flag or --set, or in the file with a value other than the built-in
// default. A file value equal to the default is ignored: the shipped configs spell out every
// key, so that `--fp8-recipe current` works with them.
void check_recipe_fields(const ExperimentConfig& c, const ConfigSources& s) {
  if (c.precision != Precision::kFp8) return;  // warn_unused_fp8_flags covers the other precisions
  const ExperimentConfig defaults;
  const fp8::RecipeKind kind = c.fp8.kind;
  for (const std::string& key : fp8::recipe_fields_without_effect(kind)) {
    const Field* f = find_field(key);
    if (f == nullptr || s.is_default(key)) continue;
    const bool flag = s.origin(key).rfind("--", 0) == 0;
    if (!flag && f->get(c) == f->get(defaults)) continue;
    fail(named(s, key) + " = " + format_value(*f, f->get(c)) + " has no effect under " + named(s, "fp8.recipe") +
         " = " + fp8::to_string(kind) + ": " + fp8::why_no_effect(kind, key) + "; remove it or choose a recipe it applies to");
  }
}

// 1. Ranges of single keys (declared in the field table).
void check_ranges(const ExperimentConfig& c, const ConfigSources& s) {
  for (const auto& f : fields()) {
    if (!f.range) continue;
    const Value v = f.get(c);
    if (!f.range->contains(as_number(v))) {
      fail(named(s, f.key) + ": expected " + f.expected() + ", got " + format_value(f, v));
    }
  }
}

// 2. Text values: run.name must be a folder name a shell, a file manager and a sweep script all
// handle (no control characters: a tab or newline would also break the report's TSV; at most
// NAME_MAX bytes); run.out_dir and fp8.skip_layers must not be empty.
void check_names(const ExperimentConfig& c, const ConfigSources& s) {
  const std::string& name = c.run.name;
  if (name.empty() || name == "." || name == ".." || name.find_first_of("/\\") != std::string::npos) {
    fail(named(s, "run.name") + ": expected a folder name (not empty, no '/', not '.' or '..'), got '" + echo(name) + "'");
  }
  const bool control = std::any_of(name.begin(), name.end(), [](char ch) {
    return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
  });
  if (control || name.size() > 255) {
    fail(named(s, "run.name") + ": expected a folder name of at most 255 bytes without control characters, got '" +
         echo(name) + "' (" + str(static_cast<int64_t>(name.size())) + " bytes)");
  }
  if (c.run.out_dir.empty()) fail(named(s, "run.out_dir") + ": expected a directory, got an empty string");
  for (const auto& layer : c.fp8.skip_layers) {
    if (layer.empty()) fail(named(s, "fp8.skip_layers") + ": expected module names, got an empty name");
  }
}

// 3a. Rules between the model's keys: the head split.
void check_model_rules(const ModelSection& m, const ConfigSources& s) {
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
}

// 3b. Rules between training keys (and the model's dropout, which recompute cannot replay).
void check_train_rules(const ExperimentConfig& c, const ConfigSources& s) {
  const auto& m = c.model;
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
  if (t.recompute != Recompute::kNone && t.recompute != Recompute::kActivation && t.recompute != Recompute::kCasts &&
      m.dropout > 0.0) {
    // The recompute runs a part of the forward a second time; it would need the first pass's
    // dropout masks (lib/model/recompute.h).
    const Field& f = *find_field("train.recompute");
    fail(named(s, "train.recompute") + " = " + format_value(f, f.get(c)) +
         " runs parts of the forward again in the backward, which would draw other dropout masks; " +
         named(s, "model.dropout") + " = " + num(m.dropout) +
         ": expected model.dropout 0 with recompute (or train.recompute none)");
  }
  if (c.precision == Precision::kFp8 && c.fp8.attention && m.dropout > 0.0) {
    // The FP8 attention (lib/fp8/layers/fp8_attention.h) has no dropout of the probabilities.
    fail(named(s, "fp8.attention") + " = true with " + named(s, "model.dropout") + " = " + num(m.dropout) +
         ": the FP8 attention has no attention dropout; expected model.dropout 0 (or fp8.attention false)");
  }
  if (t.moments_dtype == MomentsDtype::kBf16 && t.beta2 > 0.99) {
    // bf16 keeps 8 significant bits: a value moves only by changes above half its spacing, 2^-9
    // to 2^-8 of it. v = beta2 * v + (1 - beta2) * g^2 moves v by (1 - beta2) of (g^2 - v).
    spdlog::warn("{} with {} = {}: each step moves the second moment v by 1 - beta2 = {:.3g} of (g^2 - v), near or "
                 "below bf16's rounding (changes under 2^-9 to 2^-8 of v round away), so v stops tracking g^2 "
                 "(it neither decays nor follows small changes); use beta2 <= 0.99 or train.moments_dtype fp32",
                 named(s, "train.moments_dtype") + " = bf16", named(s, "train.beta2"), num(t.beta2), 1.0 - t.beta2);
  }
  if (t.eval_interval > 0 && t.eval_batches < 1) {
    fail(named(s, "train.eval_batches") + ": expected >= 1 while " + named(s, "train.eval_interval") + " = " +
         str(t.eval_interval) + " (set train.eval_interval to 0 to disable periodic evaluation), got " +
         str(t.eval_batches));
  }
}

// 3c. Rules of the data-parallel keys.
void check_dist_rules(const ExperimentConfig& c, const ConfigSources& s) {
  // dist.zero 2 and numbers out of range are refused as the key is read (fields.cpp zero_field).
  // A recipe whose scales come from each rank's amaxes (RecipeTraits::rank_amaxes: delayed).
  const fp8::RecipeTraits& recipe = fp8::recipe_traits(c.fp8.kind);
  const bool rank_amaxes_fp8 = c.precision == Precision::kFp8 && recipe.rank_amaxes;
  if (ParallelLayout::of(c.dist).shards_weights() && rank_amaxes_fp8 && !c.fp8.reduce_amax) {
    // Under ZeRO-3 each rank casts its own rows of a weight: they must share one scale.
    fail(named(s, "fp8.reduce_amax") + " = false with " + named(s, "dist.zero") + " = 3: each rank casts its part of "
         "every weight with the " + recipe.name + " scale, which must then be the same on every rank; expected true");
  }
}

// 3d. Rules of the data keys.
void check_data_rules(const ExperimentConfig& c, const ConfigSources& s, ConfigUse use) {
  const auto& m = c.model;
  const auto& d = c.data;
  if (use == ConfigUse::kTrain && d.source != DataSource::kSynthetic && d.train_path.empty()) {
    fail(named(s, "data.train_path") + ": required when " + named(s, "data.source") + " is " + to_string(d.source) +
         "; pass --set data.train_path=PATH");
  }
  if (d.source == DataSource::kSynthetic && d.order == DataOrder::kSequential) {
    fail(named(s, "data.order") + ": sequential walks the windows of data files, but " + named(s, "data.source") +
         " is synthetic (its windows are generated, never repeated); use data.source text or tokens, or data.order random");
  }
  if (d.source == DataSource::kText && m.vocab_size < 256) {
    fail(named(s, "model.vocab_size") + ": " + str(m.vocab_size) + " is too small for " + named(s, "data.source") +
         " = text (one token per byte); expected >= 256");
  }
}

}  // namespace

void validate(const ExperimentConfig& c, const ConfigSources& s, ConfigUse use) {
  check_ranges(c, s);
  check_names(c, s);
  warn_unused_fp8_flags(c, s);
  check_recipe_fields(c, s);
  check_model_rules(c.model, s);
  check_moe_rules(c, s);
  check_train_rules(c, s);
  check_dist_rules(c, s);
  check_data_rules(c, s, use);
}

}  // namespace config
}  // namespace fp8t
