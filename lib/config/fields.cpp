// The field table (one entry per key of the experiment file) and the typed value parsers and
// printers it uses. See fields.h.
#include "lib/config/fields.h"

#include <yaml-cpp/yaml.h>  // YAML::Node, YAML::Load

#include <algorithm>     // std::min, std::transform
#include <cctype>        // std::isalnum, std::tolower
#include <charconv>      // std::from_chars, std::to_chars
#include <cmath>         // std::isfinite
#include <limits>        // std::numeric_limits
#include <set>           // std::set
#include <sstream>       // std::ostringstream
#include <type_traits>   // std::remove_cvref_t
#include <utility>       // std::pair

#include "lib/fp8/scaling_math.h"  // fp8::kMaxMargin

namespace fp8t {
namespace config {
namespace {

// ---- small text helpers ------------------------------------------------------------------

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    const auto comma = s.find(',', start);
    out.push_back(trim(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// Shortest text that reads back as the same double ("0.003", "1e-08", "1").
std::string shortest(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}


std::string quoted(const std::string& s) { return "'" + s + "'"; }

// ---- scalar parsers (throw ValueError) ----------------------------------------------------

bool parse_bool(const Field& f, const std::string& text) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "1") return true;
  if (t == "false" || t == "no" || t == "0") return false;
  throw ValueError("expected " + f.expected() + ", got " + quoted(text));
}

// Start of the digits of a number: skips one leading '+'; nullptr when what follows cannot
// start a number of the wanted signedness ("", "++1", "+-1", "-1" for unsigned).
const char* number_start(const std::string& text, bool allow_minus) {
  const char* b = text.data();
  const char* e = b + text.size();
  const bool plus = b != e && *b == '+';
  if (plus) ++b;
  if (b == e || *b == '+' || (*b == '-' && (plus || !allow_minus))) return nullptr;
  return b;
}

bool looks_like_float(const std::string& text) {
  double d = 0;
  const char* b = number_start(text, true);
  const char* e = text.data() + text.size();
  if (b == nullptr) return false;
  const auto res = std::from_chars(b, e, d);
  return res.ec == std::errc() && res.ptr == e;
}

int64_t parse_int(const Field& f, const std::string& text) {
  const char* b = number_start(text, true);
  const char* e = text.data() + text.size();
  int64_t v = 0;
  const auto res = b != nullptr ? std::from_chars(b, e, v) : std::from_chars_result{e, std::errc::invalid_argument};
  if (res.ec == std::errc::result_out_of_range || (res.ec == std::errc() && res.ptr == e &&
                                                   (v < f.int_min || v > f.int_max))) {
    throw ValueError("got " + text + ", which is out of range (expected an integer between " +
                     std::to_string(f.int_min) + " and " + std::to_string(f.int_max) + ")");
  }
  if (res.ec != std::errc() || res.ptr != e) {
    throw ValueError("expected " + f.expected() + ", got " + quoted(text) +
                     (looks_like_float(text) ? " (write a whole number, without fraction or exponent)" : ""));
  }
  return v;
}

uint64_t parse_uint(const Field& f, const std::string& text) {
  const char* b = number_start(text, false);
  const char* e = text.data() + text.size();
  uint64_t v = 0;
  const auto res = b != nullptr ? std::from_chars(b, e, v) : std::from_chars_result{e, std::errc::invalid_argument};
  if (res.ec == std::errc::result_out_of_range) {
    throw ValueError("got " + text + ", which is out of range (expected " + f.expected() + " below 2^64)");
  }
  if (res.ec != std::errc() || res.ptr != e) {
    const bool negative = !text.empty() && text[0] == '-';
    throw ValueError("expected " + f.expected() + ", got " + quoted(text) +
                     (negative                 ? " (must not be negative)"
                      : looks_like_float(text) ? " (write a whole number, without fraction or exponent)"
                                               : ""));
  }
  return v;
}

double parse_double(const Field& f, const std::string& text) {
  const char* b = number_start(text, true);
  const char* e = text.data() + text.size();
  double v = 0;
  const auto res = b != nullptr ? std::from_chars(b, e, v) : std::from_chars_result{e, std::errc::invalid_argument};
  if (res.ec != std::errc() || res.ptr != e || !std::isfinite(v)) {
    throw ValueError("expected " + f.expected() + ", got " + quoted(text));
  }
  return v;
}

std::string parse_enum(const Field& f, const std::string& text) {
  const std::string t = lower(text);
  for (const auto& c : f.choices) {
    if (lower(c) == t) return c;
  }
  for (const auto& r : f.rejected) {
    if (lower(r.value) == t) {
      throw ValueError(quoted(text) + " is not supported: " + r.reason + "; expected " + f.expected());
    }
  }
  throw ValueError("expected " + f.expected() + ", got " + quoted(text));
}

GemmFlags parse_gemm_flags_text(const Field& f, const std::string& text) {
  const auto parts = split_commas(text);
  if (parts.size() != kGemmNames.size()) {
    throw ValueError("expected " + f.expected() + ", got " + quoted(text));
  }
  GemmFlags out{};
  for (size_t i = 0; i < parts.size(); ++i) {
    try {
      out[i] = parse_bool(f, parts[i]);
    } catch (const ValueError&) {
      throw ValueError(std::string(kGemmNames[i]) + ": expected a boolean (true/false, yes/no, 1/0), got " +
                       quoted(parts[i]) + " in " + quoted(text));
    }
  }
  return out;
}

std::vector<std::string> parse_list_text(const Field& f, const std::string& text) {
  if (trim(text).empty()) return {};
  auto parts = split_commas(text);
  for (const auto& p : parts) {
    if (p.empty()) throw ValueError("empty entry in " + quoted(text) + "; expected " + f.expected());
  }
  return parts;
}

int node_line(const YAML::Node& n) { return n.Mark().is_null() ? -1 : n.Mark().line; }

// ---- field builders -----------------------------------------------------------------------
// Each takes an accessor: a generic lambda `[](auto& c) -> auto& { return c.model.n_layer; }`
// that yields the member for both const and mutable configs.

template <class Acc>
using MemberOf = std::remove_cvref_t<decltype(std::declval<Acc>()(std::declval<ExperimentConfig&>()))>;

template <class Acc>
Field bool_field(std::string key, std::string help, Acc acc) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kBool;
  f.help = std::move(help);
  f.get = [acc](const ExperimentConfig& c) -> Value { return static_cast<bool>(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = std::get<bool>(v); };
  return f;
}

template <class Acc>
Field int_field(std::string key, std::string help, Acc acc, std::optional<Range> range = std::nullopt) {
  using T = MemberOf<Acc>;
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kInt;
  f.help = std::move(help);
  f.range = range;
  f.int_min = static_cast<int64_t>(std::numeric_limits<T>::min());
  f.int_max = static_cast<int64_t>(std::numeric_limits<T>::max());
  f.get = [acc](const ExperimentConfig& c) -> Value { return static_cast<int64_t>(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = static_cast<T>(std::get<int64_t>(v)); };
  return f;
}

template <class Acc>
Field uint_field(std::string key, std::string help, Acc acc) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kUInt;
  f.help = std::move(help);
  f.get = [acc](const ExperimentConfig& c) -> Value { return static_cast<uint64_t>(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = std::get<uint64_t>(v); };
  return f;
}

template <class Acc>
Field float_field(std::string key, std::string help, Acc acc, std::optional<Range> range = std::nullopt) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kFloat;
  f.help = std::move(help);
  f.range = range;
  f.get = [acc](const ExperimentConfig& c) -> Value { return static_cast<double>(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = std::get<double>(v); };
  return f;
}

template <class Acc>
Field string_field(std::string key, std::string help, Acc acc) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kString;
  f.help = std::move(help);
  f.get = [acc](const ExperimentConfig& c) -> Value { return std::string(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = std::get<std::string>(v); };
  return f;
}

template <class Acc>
Field string_list_field(std::string key, std::string help, Acc acc) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kStringList;
  f.help = std::move(help);
  f.get = [acc](const ExperimentConfig& c) -> Value { return std::vector<std::string>(acc(c)); };
  f.set = [acc](ExperimentConfig& c, const Value& v) { acc(c) = std::get<std::vector<std::string>>(v); };
  return f;
}

// For structs with bool members fprop, dgrad, wgrad.
template <class Acc>
Field gemm_flags_field(std::string key, std::string help, Acc acc) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kGemmFlags;
  f.help = std::move(help);
  f.get = [acc](const ExperimentConfig& c) -> Value {
    const auto& g = acc(c);
    return GemmFlags{g.fprop, g.dgrad, g.wgrad};
  };
  f.set = [acc](ExperimentConfig& c, const Value& v) {
    const auto& flags = std::get<GemmFlags>(v);
    auto& g = acc(c);
    g.fprop = flags[0];
    g.dgrad = flags[1];
    g.wgrad = flags[2];
  };
  return f;
}

template <class E>
using EnumNames = std::vector<std::pair<E, const char*>>;

template <class E>
const char* enum_name(const EnumNames<E>& names, E v) {
  for (const auto& [value, name] : names) {
    if (value == v) return name;
  }
  return "?";
}

template <class Acc, class E>
Field enum_field(std::string key, std::string help, const EnumNames<E>& names, Acc acc,
                 std::vector<Rejected> rejected = {}) {
  Field f;
  f.key = std::move(key);
  f.type = FieldType::kEnum;
  f.help = std::move(help);
  for (const auto& [value, name] : names) f.choices.push_back(name);
  f.rejected = std::move(rejected);
  f.get = [acc, names](const ExperimentConfig& c) -> Value { return std::string(enum_name(names, acc(c))); };
  f.set = [acc, names](ExperimentConfig& c, const Value& v) {
    const auto& s = std::get<std::string>(v);
    for (const auto& [value, name] : names) {
      if (s == name) {
        acc(c) = value;
        return;
      }
    }
    throw ValueError("unknown value " + quoted(s));  // parse_enum only yields canonical names
  };
  return f;
}

// ---- the enum spellings -------------------------------------------------------------------

const EnumNames<DeviceKind>& device_names() {
  static const EnumNames<DeviceKind> n = {{DeviceKind::kAuto, "auto"}, {DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}};
  return n;
}
const EnumNames<Precision>& precision_names() {
  static const EnumNames<Precision> n = {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}, {Precision::kFp8, "fp8"}};
  return n;
}
const EnumNames<NormKind>& norm_names() {
  static const EnumNames<NormKind> n = {{NormKind::kLayerNorm, "layernorm"}, {NormKind::kRMSNorm, "rmsnorm"}};
  return n;
}
const EnumNames<Activation>& activation_names() {
  static const EnumNames<Activation> n = {{Activation::kGelu, "gelu"}, {Activation::kSwiGLU, "swiglu"}};
  return n;
}
const EnumNames<DataSource>& source_names() {
  static const EnumNames<DataSource> n = {{DataSource::kSynthetic, "synthetic"}, {DataSource::kText, "text"}, {DataSource::kTokens, "tokens"}};
  return n;
}
const EnumNames<LrSchedule>& schedule_names() {
  static const EnumNames<LrSchedule> n = {{LrSchedule::kCosine, "cosine"}, {LrSchedule::kLinear, "linear"}, {LrSchedule::kConstant, "constant"}};
  return n;
}
const EnumNames<fp8::RecipeFormat>& format_names() {
  static const EnumNames<fp8::RecipeFormat> n = {{fp8::RecipeFormat::kHybrid, "HYBRID"}, {fp8::RecipeFormat::kE4M3, "E4M3"}};
  return n;
}
const EnumNames<fp8::AmaxUpdate>& amax_update_names() {
  static const EnumNames<fp8::AmaxUpdate> n = {{fp8::AmaxUpdate::kStep, "step"}, {fp8::AmaxUpdate::kMicrobatch, "microbatch"}};
  return n;
}
const EnumNames<fp8::AmaxComputeAlgo>& algo_names() {
  static const EnumNames<fp8::AmaxComputeAlgo> n = {{fp8::AmaxComputeAlgo::kMax, "max"}, {fp8::AmaxComputeAlgo::kMostRecent, "most_recent"}};
  return n;
}

// ---- the table ----------------------------------------------------------------------------

std::vector<Field> build_table() {
  std::vector<Field> t;
  // run
  t.push_back(string_field("run.name", "run folder name under run.out_dir",
                           [](auto& c) -> auto& { return c.run.name; }));
  t.push_back(string_field("run.out_dir", "directory that holds the run folders",
                           [](auto& c) -> auto& { return c.run.out_dir; }));
  t.push_back(uint_field("run.seed", "random seed (weights, data order, dropout)",
                         [](auto& c) -> auto& { return c.run.seed; }));
  t.push_back(enum_field("run.device", "auto: cuda when available, else cpu", device_names(),
                         [](auto& c) -> auto& { return c.run.device; }));
  t.push_back(bool_field("run.quiet", "no per-step console status lines (errors still print)",
                         [](auto& c) -> auto& { return c.run.quiet; }));
  t.push_back(bool_field("run.overwrite", "allow replacing an existing run folder",
                         [](auto& c) -> auto& { return c.run.overwrite; }));
  t.push_back(bool_field("run.tensorboard", "also write TensorBoard event files into the run folder",
                         [](auto& c) -> auto& { return c.run.tensorboard; }));
  // model
  t.push_back(int_field("model.vocab_size", "token vocabulary size (256 for byte-level text)",
                        [](auto& c) -> auto& { return c.model.vocab_size; }, at_least(1)));
  t.push_back(int_field("model.seq_len", "context length in tokens",
                        [](auto& c) -> auto& { return c.model.seq_len; }, at_least(1)));
  t.push_back(int_field("model.n_layer", "number of transformer blocks",
                        [](auto& c) -> auto& { return c.model.n_layer; }, at_least(1)));
  t.push_back(int_field("model.n_head", "attention heads per block (must divide model.d_model)",
                        [](auto& c) -> auto& { return c.model.n_head; }, at_least(1)));
  t.push_back(int_field("model.d_model", "residual stream width",
                        [](auto& c) -> auto& { return c.model.d_model; }, at_least(1)));
  t.push_back(int_field("model.d_ff", "MLP hidden width; 0 means 4 * d_model",
                        [](auto& c) -> auto& { return c.model.d_ff; }, at_least(0)));
  t.push_back(enum_field("model.norm", "normalisation layer", norm_names(),
                         [](auto& c) -> auto& { return c.model.norm; }));
  t.push_back(float_field("model.norm_eps", "epsilon of the normalisation layers",
                          [](auto& c) -> auto& { return c.model.norm_eps; }, greater_than(0)));
  t.push_back(enum_field("model.activation", "MLP activation", activation_names(),
                         [](auto& c) -> auto& { return c.model.activation; }));
  t.push_back(bool_field("model.bias", "bias terms in Linear and norm layers",
                         [](auto& c) -> auto& { return c.model.bias; }));
  t.push_back(float_field("model.dropout", "dropout probability (0 disables)",
                          [](auto& c) -> auto& { return c.model.dropout; }, half_open(0, 1)));
  t.push_back(bool_field("model.tie_embeddings", "share the token embedding with the output head",
                         [](auto& c) -> auto& { return c.model.tie_embeddings; }));
  // data
  t.push_back(enum_field("data.source", "synthetic data, a text file (bytes) or a token file", source_names(),
                         [](auto& c) -> auto& { return c.data.source; }));
  t.push_back(string_field("data.train_path", "text file, llm.c shard or nanoGPT .bin (source text|tokens)",
                           [](auto& c) -> auto& { return c.data.train_path; }));
  t.push_back(string_field("data.val_path", "optional separate validation file; else data.val_fraction of train",
                           [](auto& c) -> auto& { return c.data.val_path; }));
  t.push_back(float_field("data.val_fraction", "contiguous tail of the training data used for validation",
                          [](auto& c) -> auto& { return c.data.val_fraction; }, open_interval(0, 1)));
  // train
  t.push_back(int_field("train.steps", "optimizer steps",
                        [](auto& c) -> auto& { return c.train.steps; }, at_least(1)));
  t.push_back(int_field("train.micro_batch_size", "sequences per forward/backward pass",
                        [](auto& c) -> auto& { return c.train.micro_batch_size; }, at_least(1)));
  t.push_back(int_field("train.grad_accum_steps", "micro-batches accumulated per optimizer step",
                        [](auto& c) -> auto& { return c.train.grad_accum_steps; }, at_least(1)));
  t.push_back(float_field("train.lr", "peak learning rate",
                          [](auto& c) -> auto& { return c.train.lr; }, greater_than(0)));
  t.push_back(float_field("train.min_lr", "final learning rate of the decay (<= train.lr)",
                          [](auto& c) -> auto& { return c.train.min_lr; }, at_least(0)));
  t.push_back(int_field("train.warmup_steps", "linear warmup steps (<= train.steps)",
                        [](auto& c) -> auto& { return c.train.warmup_steps; }, at_least(0)));
  t.push_back(enum_field("train.schedule", "learning-rate decay after warmup", schedule_names(),
                         [](auto& c) -> auto& { return c.train.schedule; }));
  t.push_back(float_field("train.weight_decay", "AdamW decoupled weight decay",
                          [](auto& c) -> auto& { return c.train.weight_decay; }, at_least(0)));
  t.push_back(float_field("train.beta1", "AdamW beta1",
                          [](auto& c) -> auto& { return c.train.beta1; }, half_open(0, 1)));
  t.push_back(float_field("train.beta2", "AdamW beta2",
                          [](auto& c) -> auto& { return c.train.beta2; }, half_open(0, 1)));
  t.push_back(float_field("train.eps", "AdamW epsilon",
                          [](auto& c) -> auto& { return c.train.eps; }, greater_than(0)));
  t.push_back(float_field("train.grad_clip", "global-norm gradient clip; 0 disables",
                          [](auto& c) -> auto& { return c.train.grad_clip; }, at_least(0)));
  t.push_back(int_field("train.eval_interval", "steps between evaluations; 0 disables periodic eval (a final eval still runs)",
                        [](auto& c) -> auto& { return c.train.eval_interval; }, at_least(0)));
  t.push_back(int_field("train.eval_batches", "validation batches per evaluation",
                        [](auto& c) -> auto& { return c.train.eval_batches; }, at_least(0)));
  t.push_back(int_field("train.log_interval", "steps between log lines",
                        [](auto& c) -> auto& { return c.train.log_interval; }, at_least(1)));
  t.push_back(int_field("train.checkpoint_interval", "steps between checkpoints; 0: only the final checkpoint",
                        [](auto& c) -> auto& { return c.train.checkpoint_interval; }, at_least(0)));
  t.push_back(float_field("train.checkpoint_every_min",
                          "also checkpoint when this many minutes passed since the last checkpoint; 0 disables",
                          [](auto& c) -> auto& { return c.train.checkpoint_every_min; }, at_least(0)));
  t.push_back(int_field("train.max_skipped_steps",
                        "consecutive non-finite (skipped) steps after which the run stops as diverged",
                        [](auto& c) -> auto& { return c.train.max_skipped_steps; }, at_least(1)));
  t.push_back(float_field("train.loss_scale_init", "precision fp16: initial dynamic loss scale",
                          [](auto& c) -> auto& { return c.train.loss_scale_init; }, greater_than(0)));
  t.push_back(float_field("train.loss_scale_growth_factor",
                          "precision fp16: the loss scale is multiplied by this after loss_scale_growth_interval finite steps",
                          [](auto& c) -> auto& { return c.train.loss_scale_growth_factor; }, greater_than(1)));
  t.push_back(float_field("train.loss_scale_backoff",
                          "precision fp16: the loss scale is multiplied by this after a step with inf/NaN gradients",
                          [](auto& c) -> auto& { return c.train.loss_scale_backoff; }, open_interval(0, 1)));
  t.push_back(int_field("train.loss_scale_growth_interval", "precision fp16: finite steps between loss-scale growths",
                        [](auto& c) -> auto& { return c.train.loss_scale_growth_interval; }, at_least(1)));
  // precision
  // dist
  t.push_back(int_field("dist.timeout_s",
                        "data-parallel runs: seconds a rendezvous or collective may wait for the other ranks "
                        "before the job fails",
                        [](auto& c) -> auto& { return c.dist.timeout_s; }, at_least(1)));
  t.push_back(float_field("dist.bucket_mb", "data-parallel runs: gradient all-reduce bucket size in MiB",
                          [](auto& c) -> auto& { return c.dist.bucket_mb; }, greater_than(0)));
  t.push_back(enum_field("precision", "numeric precision of the Linear layers", precision_names(),
                         [](auto& c) -> auto& { return c.precision; }));
  // fp8
  t.push_back(int_field("fp8.margin", "scale = (fp8_max * 2^-margin) / amax; negative margins allowed",
                        [](auto& c) -> auto& { return c.fp8.margin; },
                        Range{-1.0 * fp8::kMaxMargin, 1.0 * fp8::kMaxMargin}));
  t.push_back(int_field("fp8.interval", "recompute scales every `interval` updates (history rolls every update)",
                        [](auto& c) -> auto& { return c.fp8.interval; }, at_least(1)));
  t.push_back(enum_field("fp8.fp8_format", "HYBRID: E4M3 forward, E5M2 gradients; E4M3: every tensor E4M3",
                         format_names(), [](auto& c) -> auto& { return c.fp8.fp8_format; },
                         {{"E5M2", "Transformer Engine rejects pure E5M2 (HYBRID uses E5M2 for the gradients)"}}));
  t.push_back(int_field("fp8.amax_history_len", "amax history window per tensor",
                        [](auto& c) -> auto& { return c.fp8.amax_history_len; }, at_least(1)));
  t.push_back(enum_field("fp8.amax_compute_algo", "amax from the history: its max, or the most recent entry",
                         algo_names(), [](auto& c) -> auto& { return c.fp8.amax_compute_algo; }));
  t.push_back(enum_field("fp8.amax_update",
                         "step: one scale update per optimizer step (amax over its micro-batches); microbatch: "
                         "one per micro-batch, as TransformerEngine",
                         amax_update_names(), [](auto& c) -> auto& { return c.fp8.amax_update; }));
  t.push_back(bool_field("fp8.reduce_amax", "data-parallel: MAX-reduce amaxes across ranks before each scale update",
                         [](auto& c) -> auto& { return c.fp8.reduce_amax; }));
  t.push_back(gemm_flags_field("fp8.override_linear_precision", "GEMMs of every FP8 Linear that run in high precision instead",
                               [](auto& c) -> auto& { return c.fp8.override_linear_precision; }));
  t.push_back(gemm_flags_field("fp8.fast_accumulation", "fast (non-promoting) FP8 accumulation per GEMM on the GPU",
                               [](auto& c) -> auto& { return c.fp8.fast_accumulation; }));
  t.push_back(string_list_field("fp8.skip_layers", "module names (exact, or a suffix after '.') kept in high precision",
                                [](auto& c) -> auto& { return c.fp8.skip_layers; }));
  t.push_back(int_field("fp8.min_features_product", "Linears with in*out features below this stay in high precision; 0 converts all",
                        [](auto& c) -> auto& { return c.fp8.min_features_product; }, at_least(0)));
  t.push_back(bool_field("fp8.stats", "per-layer FP8 saturation/underflow statistics on log steps",
                         [](auto& c) -> auto& { return c.fp8.stats; }));
  return t;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

// ---- Range --------------------------------------------------------------------------------

bool Range::contains(double v) const {
  if (lo && (lo_open ? !(v > *lo) : !(v >= *lo))) return false;
  if (hi && (hi_open ? !(v < *hi) : !(v <= *hi))) return false;
  return true;
}

std::string Range::describe() const {
  if (lo && hi) {
    return "in " + std::string(lo_open ? "(" : "[") + shortest(*lo) + ", " + shortest(*hi) + (hi_open ? ")" : "]");
  }
  if (lo) return (lo_open ? "> " : ">= ") + shortest(*lo);
  if (hi) return (hi_open ? "< " : "<= ") + shortest(*hi);
  return "";
}

Range at_least(double lo) { return Range{lo, std::nullopt, false, false}; }
Range greater_than(double lo) { return Range{lo, std::nullopt, true, false}; }
Range half_open(double lo, double hi) { return Range{lo, hi, false, true}; }
Range open_interval(double lo, double hi) { return Range{lo, hi, true, true}; }

// ---- Field --------------------------------------------------------------------------------

std::string Field::section() const {
  const auto dot = key.find('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

std::string Field::name() const {
  const auto dot = key.find('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string Field::type_name() const {
  switch (type) {
    case FieldType::kBool: return "bool";
    case FieldType::kInt: return "int";
    case FieldType::kUInt: return "uint64";
    case FieldType::kFloat: return "float";
    case FieldType::kString: return "string";
    case FieldType::kEnum: return join(choices, "|");
    case FieldType::kGemmFlags: return "{fprop,dgrad,wgrad}";
    case FieldType::kStringList: return "list of strings";
  }
  return "?";
}

std::string Field::expected() const {
  const std::string r = range ? " " + range->describe() : "";
  switch (type) {
    case FieldType::kBool: return "a boolean (true/false, yes/no, 1/0)";
    case FieldType::kInt: return "an integer" + r;
    case FieldType::kUInt: return "a non-negative integer";
    case FieldType::kFloat: return "a number" + r;
    case FieldType::kString: return "a string";
    case FieldType::kEnum: return "one of " + join(choices, ", ");
    case FieldType::kGemmFlags:
      return "a mapping {fprop: bool, dgrad: bool, wgrad: bool}, a list of three booleans, or "
             "fprop,dgrad,wgrad text such as 0,0,1";
    case FieldType::kStringList: return "a list of strings (or comma-separated names)";
  }
  return "?";
}

// ---- lookup -------------------------------------------------------------------------------

const std::vector<Field>& fields() {
  static const std::vector<Field> table = build_table();
  return table;
}

const Field* find_field(std::string_view key) {
  for (const auto& f : fields()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

const std::vector<std::string>& top_level_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& f : fields()) {
      const std::string top = f.section().empty() ? f.key : f.section();
      if (std::find(out.begin(), out.end(), top) == out.end()) out.push_back(top);
    }
    return out;
  }();
  return names;
}

std::string closest_key(std::string_view key) {
  const auto dot = key.rfind('.');
  const std::string_view leaf = dot == std::string_view::npos ? key : key.substr(dot + 1);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  auto consider = [&](const std::string& candidate, size_t d) {
    if (d < best_d) {
      best_d = d;
      best = candidate;
    }
  };
  for (const auto& f : fields()) {
    consider(f.key, edit_distance(key, f.key));
    consider(f.key, edit_distance(leaf, f.name()));
  }
  if (dot == std::string_view::npos) {
    for (const auto& top : top_level_names()) consider(top, edit_distance(key, top));
  }
  const size_t limit = std::max<size_t>(2, leaf.size() / 3);
  return best_d <= limit && best != key ? best : "";
}

std::string did_you_mean(std::string_view key) {
  const std::string best = closest_key(key);
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

// ---- parsing ------------------------------------------------------------------------------

Value parse_text(const Field& f, const std::string& text, const Value& current) {
  switch (f.type) {
    case FieldType::kBool: return parse_bool(f, text);
    case FieldType::kInt: return parse_int(f, text);
    case FieldType::kUInt: return parse_uint(f, text);
    case FieldType::kFloat: return parse_double(f, text);
    case FieldType::kString: return text;
    case FieldType::kEnum: return parse_enum(f, text);
    case FieldType::kGemmFlags:
    case FieldType::kStringList: {
      const std::string t = trim(text);
      if (!t.empty() && (t[0] == '{' || t[0] == '[')) {
        YAML::Node node;
        try {
          node = YAML::Load(t);
        } catch (const YAML::Exception& e) {
          throw ValueError("cannot read " + quoted(text) + " (" + e.msg + "); expected " + f.expected());
        }
        return parse_node(f, node, current);
      }
      if (f.type == FieldType::kGemmFlags) return parse_gemm_flags_text(f, text);
      return parse_list_text(f, text);
    }
  }
  throw ValueError("unsupported field type");
}

Value parse_node(const Field& f, const YAML::Node& n, const Value& current) {
  if (!n.IsDefined() || n.IsNull()) {
    if (f.type == FieldType::kString) return std::string();
    if (f.type == FieldType::kStringList) return std::vector<std::string>();
    throw ValueError("missing value; expected " + f.expected());
  }
  if (f.type == FieldType::kGemmFlags && n.IsMap()) {
    GemmFlags out = std::get<GemmFlags>(current);
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      const auto pos = std::find_if(kGemmNames.begin(), kGemmNames.end(), [&](const char* g) { return k == g; });
      if (pos == kGemmNames.end()) {
        throw ValueError("unknown entry " + quoted(k) + "; expected fprop, dgrad, wgrad", node_line(it->first));
      }
      if (!seen.insert(k).second) throw ValueError("duplicate entry " + quoted(k), node_line(it->first));
      if (!it->second.IsScalar()) {
        throw ValueError(k + ": expected a boolean (true/false, yes/no, 1/0)", node_line(it->second));
      }
      try {
        out[pos - kGemmNames.begin()] = parse_bool(f, it->second.Scalar());
      } catch (const ValueError&) {
        throw ValueError(k + ": expected a boolean (true/false, yes/no, 1/0), got " + quoted(it->second.Scalar()),
                         node_line(it->second));
      }
    }
    return out;
  }
  if (f.type == FieldType::kGemmFlags && n.IsSequence()) {
    if (n.size() != kGemmNames.size()) {
      throw ValueError("expected three booleans (fprop, dgrad, wgrad), got a list of " + std::to_string(n.size()));
    }
    GemmFlags out{};
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node e = n[i];
      if (!e.IsScalar()) throw ValueError(std::string(kGemmNames[i]) + ": expected a boolean", node_line(e));
      try {
        out[i] = parse_bool(f, e.Scalar());
      } catch (const ValueError&) {
        throw ValueError(std::string(kGemmNames[i]) + ": expected a boolean (true/false, yes/no, 1/0), got " +
                         quoted(e.Scalar()), node_line(e));
      }
    }
    return out;
  }
  if (f.type == FieldType::kStringList && n.IsSequence()) {
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node e = n[i];
      if (!e.IsScalar()) throw ValueError("entry " + std::to_string(i) + ": expected a string", node_line(e));
      out.push_back(e.Scalar());
    }
    return out;
  }
  if (!n.IsScalar()) {
    throw ValueError("expected " + f.expected() + ", got a " + (n.IsSequence() ? "list" : "mapping"));
  }
  return parse_text(f, n.Scalar(), current);
}

// ---- printing -----------------------------------------------------------------------------

std::string yaml_quote(const std::string& s) {
  static const std::set<std::string> ambiguous = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"};
  bool plain = !s.empty() && s[0] != '-' && !ambiguous.count(lower(s)) && !looks_like_float(s);
  for (const char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-')) plain = false;
  }
  if (plain) return s;
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string format_float(double v) {
  std::string s = shortest(v);
  if (s.find_first_of(".eEin") == std::string::npos) s += ".0";
  return s;
}

std::string format_value(const Field& f, const Value& v) {
  switch (f.type) {
    case FieldType::kBool: return std::get<bool>(v) ? "true" : "false";
    case FieldType::kInt: return std::to_string(std::get<int64_t>(v));
    case FieldType::kUInt: return std::to_string(std::get<uint64_t>(v));
    case FieldType::kFloat: return format_float(std::get<double>(v));
    case FieldType::kString: return yaml_quote(std::get<std::string>(v));
    case FieldType::kEnum: return std::get<std::string>(v);
    case FieldType::kGemmFlags: {
      const auto& g = std::get<GemmFlags>(v);
      std::vector<std::string> parts;
      for (size_t i = 0; i < g.size(); ++i) parts.push_back(std::string(kGemmNames[i]) + ": " + (g[i] ? "true" : "false"));
      return "{" + join(parts, ", ") + "}";
    }
    case FieldType::kStringList: {
      std::vector<std::string> parts;
      for (const auto& s : std::get<std::vector<std::string>>(v)) parts.push_back(yaml_quote(s));
      return "[" + join(parts, ", ") + "]";
    }
  }
  return "?";
}

std::vector<std::string> differing_keys(const ExperimentConfig& a, const ExperimentConfig& b) {
  std::vector<std::string> out;
  for (const auto& f : fields()) {
    if (f.get(a) != f.get(b)) out.push_back(f.key);
  }
  return out;
}

const char* to_string(DeviceKind v) { return enum_name(device_names(), v); }
const char* to_string(Precision v) { return enum_name(precision_names(), v); }
const char* to_string(NormKind v) { return enum_name(norm_names(), v); }
const char* to_string(Activation v) { return enum_name(activation_names(), v); }
const char* to_string(DataSource v) { return enum_name(source_names(), v); }
const char* to_string(LrSchedule v) { return enum_name(schedule_names(), v); }

}  // namespace config

bool operator==(const ExperimentConfig& a, const ExperimentConfig& b) {
  return config::differing_keys(a, b).empty();
}

}  // namespace fp8t
