#include "lib/data/dataset.h"

#include <ATen/Parallel.h>  // at::parallel_for

#include <algorithm>  // std::max, std::max_element
#include <cmath>      // std::llround
#include <cstdlib>    // std::getenv
#include <filesystem>  // std::filesystem::equivalent
#include <fstream>    // std::ofstream
#include <iomanip>    // std::setprecision
#include <mutex>      // std::mutex, std::lock_guard
#include <sstream>    // std::ostringstream
#include <vector>     // std::vector

#include "lib/config/fields.h"      // config::to_string
#include "lib/data/counter_rng.h"   // hash_key, SplitMix64, KeyedPermutation, Stream
#include "lib/data/markov_chain.h"  // MarkovChain
#include "lib/data/shard_set.h"     // ShardSet, load_data_files
#include "lib/data/text_source.h"   // kByteVocabSize
#include "lib/util/error.h"         // FP8T_CHECK, FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::data {

namespace {

constexpr const char* kTrainKey = "data.train_path";
constexpr const char* kValKey = "data.val_path";

// FP8TRAIN_TEST_WINDOWS (dataset.h): the training rows of this rank, appended as they are drawn.
class WindowLog {
 public:
  static std::shared_ptr<WindowLog> from_environment(int rank) {
    const char* prefix = std::getenv("FP8TRAIN_TEST_WINDOWS");
    if (prefix == nullptr || *prefix == '\0') return nullptr;
    return std::make_shared<WindowLog>(std::string(prefix) + ".rank" + std::to_string(rank));
  }
  explicit WindowLog(const std::string& path) : out_(path, std::ios::app) {
    FP8T_INPUT_CHECK(out_.good(), "FP8TRAIN_TEST_WINDOWS: cannot append to '", path, "'");
  }
  void write(int64_t first_stream_number, const std::vector<WindowAt>& rows) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (size_t r = 0; r < rows.size(); ++r) {
      out_ << first_stream_number + static_cast<int64_t>(r) << ' ' << rows[r].span << ' ' << rows[r].offset << '\n';
    }
    out_.flush();
  }

 private:
  std::mutex mutex_;
  std::ofstream out_;
};

// The training part and the validation part of the training files: the contiguous tail of
// the last file, data.val_fraction of all training tokens (for one file: its tail).
struct TrainValSplit {
  std::vector<TokenSpan> train;
  std::vector<TokenSpan> val;
  std::string val_origin;
};

TrainValSplit split_validation_tail(const DataSection& data, const LoadedFiles& files, int64_t seq_len) {
  FP8T_INPUT_CHECK(data.val_fraction > 0.0 && data.val_fraction < 1.0,
                   "data.val_fraction must be in (0, 1) when data.val_path is not set (got ", data.val_fraction,
                   "): validation is the tail of ", kTrainKey);
  int64_t n = 0;
  for (const TokenSpan& s : files.spans) n += s.size();
  const TokenSpan& last = files.spans.back();
  const std::string& path = last.path;
  const int64_t needed = seq_len + 1;
  // Contiguous tail rather than scattered windows: no window straddles train and val text.
  const int64_t n_val = std::llround(static_cast<double>(n) * data.val_fraction);
  const int64_t n_train = last.size() - n_val;  // what stays for training of the last file
  FP8T_INPUT_CHECK(n_val >= needed, kTrainKey, ": the validation tail of '", path, "' (data.val_fraction ",
                   data.val_fraction, " of ", n, " tokens) holds ", n_val, " tokens, fewer than the ", needed,
                   " (model.seq_len + 1) one window needs; raise data.val_fraction or set ", kValKey);
  FP8T_INPUT_CHECK(n_train >= needed, kTrainKey, ": after holding out the last ", n_val, " tokens of '", path,
                   "' for validation (data.val_fraction ", data.val_fraction, "), ", n_train,
                   " tokens remain for training, fewer than the ", needed, " (model.seq_len + 1) one window needs; ",
                   files.spans.size() > 1 ? "the tail comes from the last file alone: " : "",
                   "lower data.val_fraction or set ", kValKey);
  TrainValSplit split;
  split.train = files.spans;
  split.train.back().end = last.begin + n_train;
  split.val = {last};
  split.val.back().begin = last.begin + n_train;
  std::ostringstream origin;
  origin << "last " << data.val_fraction * 100.0 << "% of " << kTrainKey;
  split.val_origin = origin.str();
  return split;
}

}  // namespace

struct Dataset::Impl {
  DataSource source = DataSource::kSynthetic;
  DataOrder order = DataOrder::kRandom;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  uint64_t seed = 0;
  int rank = 0;        // in the data-parallel group (ParallelLayout::data_parallel_rank)
  int world_size = 1;  // of the data-parallel group
  std::optional<MarkovChain> chain;  // synthetic
  ShardSet train;                    // text / tokens
  ShardSet val;
  int64_t vocab_needed = 0;
  std::string description;
  std::vector<std::string> warnings;  // the data files' manifest checks (shard_manifest.h)
  std::shared_ptr<WindowLog> window_log;  // FP8TRAIN_TEST_WINDOWS, else null

  // The training window of stream number s under data.order sequential.
  WindowAt sequential_window(int64_t s) const;
  // Synthetic batch: row r is the chain's walk for key_of_row(r).
  template <typename KeyOfRow>
  Batch chain_batch(int64_t batch_size, KeyOfRow&& key_of_row) const;
  // File batch: row r is the window of `set` at rows[r].
  Batch window_batch(const ShardSet& set, const std::vector<WindowAt>& rows) const;
  // An empty [batch_size, T] batch and fill_rows(begin, end, inputs, targets) over row chunks.
  template <typename RowsFiller>
  Batch make_batch(int64_t batch_size, RowsFiller&& fill_rows) const;
  // Checks one window read from a file: a token beyond the vocabulary means the file changed.
  void check_window(const int64_t* tokens, const TokenSpan& span, int64_t offset) const;
};

template <typename RowsFiller>
Batch Dataset::Impl::make_batch(int64_t batch_size, RowsFiller&& fill_rows) const {
  FP8T_CHECK(batch_size > 0, "batch size must be positive, got ", batch_size);
  const auto options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  Batch batch{at::empty({batch_size, seq_len}, options), at::empty({batch_size, seq_len}, options)};
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  // Rows are independent functions of their keys, so splitting them over threads cannot change
  // the result. Tasks get at least ~16k tokens, so small batches stay on the calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / seq_len);
  at::parallel_for(0, batch_size, grain,
                   [&](int64_t begin, int64_t end) { fill_rows(begin, end, inputs, targets); });
  return batch;
}

template <typename KeyOfRow>
Batch Dataset::Impl::chain_batch(int64_t batch_size, KeyOfRow&& key_of_row) const {
  return make_batch(batch_size, [&](int64_t begin, int64_t end, int64_t* inputs, int64_t* targets) {
    std::vector<uint64_t> keys(end - begin);
    for (int64_t row = begin; row < end; ++row) keys[row - begin] = key_of_row(row);
    chain->sample_rows(keys.data(), end - begin, seq_len, inputs + begin * seq_len,
                       targets + begin * seq_len);
  });
}

void Dataset::Impl::check_window(const int64_t* tokens, const TokenSpan& span, int64_t offset) const {
  const int64_t largest = *std::max_element(tokens, tokens + seq_len + 1);
  if (largest < vocab_size) return;
  FP8T_THROW(ExitCode::kTrainingFailed, "data file '", span.path, "' changed while the run reads it: the window at token ",
             offset, " holds token ", largest, ", beyond model.vocab_size ", vocab_size,
             ", which the file did not hold when the run opened it (rewritten in place?). Restore the file and "
             "continue with --resume");
}

Batch Dataset::Impl::window_batch(const ShardSet& set, const std::vector<WindowAt>& rows) const {
  const int64_t batch_size = static_cast<int64_t>(rows.size());
  return make_batch(batch_size, [&](int64_t begin, int64_t end, int64_t* inputs, int64_t* targets) {
    std::vector<int64_t> window(seq_len + 1);
    for (int64_t row = begin; row < end; ++row) {
      const TokenSpan& span = set.spans()[rows[row].span];
      span.store->copy_to(rows[row].offset, seq_len + 1, window.data());
      if (span.store->file_backed()) check_window(window.data(), span, rows[row].offset);
      std::copy_n(window.begin(), seq_len, inputs + row * seq_len);
      std::copy_n(window.begin() + 1, seq_len, targets + row * seq_len);
    }
  });
}

WindowAt Dataset::Impl::sequential_window(int64_t s) const {
  const auto windows = static_cast<uint64_t>(train.windows());
  const uint64_t epoch = static_cast<uint64_t>(s) / windows;
  const KeyedPermutation order(windows, hash_key({seed, static_cast<uint64_t>(Stream::kTrainOrder), epoch}));
  return train.window(static_cast<int64_t>(order(static_cast<uint64_t>(s) % windows)));
}

namespace {

std::string synthetic_description(const MarkovChain& chain, int64_t vocab_size, uint64_t seed) {
  std::ostringstream describe;
  describe << "synthetic: random first-order Markov chain over " << vocab_size << " tokens ("
           << MarkovChain::kMinSuccessors << "-" << MarkovChain::kMaxSuccessors << " successors each, seed " << seed
           << "), windows generated on the fly; entropy floor " << std::fixed << std::setprecision(4)
           << chain.entropy_rate_nats() << " nats";
  return describe.str();
}

}  // namespace

Dataset Dataset::open(const DataSection& data, const ModelSection& model, uint64_t seed, const ParallelLayout& layout) {
  const int rank = layout.data_parallel_rank();
  const int world_size = layout.data_parallel_size();
  FP8T_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "bad data-parallel rank ", rank,
             " of world size ", world_size);
  FP8T_INPUT_CHECK(model.seq_len >= 1, "model.seq_len must be at least 1, got ", model.seq_len);
  FP8T_INPUT_CHECK(model.vocab_size >= 2, "model.vocab_size must be at least 2, got ", model.vocab_size);

  auto impl = std::make_shared<Impl>();
  impl->source = data.source;
  impl->order = data.order;
  impl->seq_len = model.seq_len;
  impl->vocab_size = model.vocab_size;
  impl->seed = seed;
  impl->rank = rank;
  impl->world_size = world_size;
  impl->window_log = WindowLog::from_environment(layout.rank);

  if (data.source == DataSource::kSynthetic) {
    FP8T_INPUT_CHECK(data.order == DataOrder::kRandom,
                     "data.order sequential needs data files (data.source text or tokens); synthetic windows are "
                     "generated, never repeated");
    impl->chain = MarkovChain::random(model.vocab_size, seed);
    impl->vocab_needed = model.vocab_size;  // the chain is irreducible: every token occurs
    impl->description = synthetic_description(*impl->chain, model.vocab_size, seed);
    return Dataset(std::move(impl));
  }

  const char* source_name = data.source == DataSource::kText ? "text" : "tokens";
  FP8T_INPUT_CHECK(!data.train_path.empty(), kTrainKey, " must name a file when data.source is ",
                   source_name);
  if (data.source == DataSource::kText) {
    FP8T_INPUT_CHECK(model.vocab_size >= kByteVocabSize,
                     "data.source text reads bytes (256 token ids), but model.vocab_size is ",
                     model.vocab_size, "; set model.vocab_size to at least ", kByteVocabSize);
  }
  const LoadedFiles train = load_data_files(data.source, data.train_path, kTrainKey, model);
  int64_t vocab_needed = train.max_token + 1;
  impl->warnings = train.warnings;
  TrainValSplit split;
  if (!data.val_path.empty()) {
    const LoadedFiles val = load_data_files(data.source, data.val_path, kValKey, model);
    for (const TokenSpan& v : val.spans) {
      for (const TokenSpan& t : train.spans) {
        std::error_code ec;
        FP8T_INPUT_CHECK(!std::filesystem::equivalent(v.path, t.path, ec), kValKey, ": '", v.path,
                         "' is also a training file (", kTrainKey, " names '", t.path,
                         "'); validation must be held-out data");
      }
    }
    split.train = train.spans;
    split.val = val.spans;
    vocab_needed = std::max(vocab_needed, val.max_token + 1);
    split.val_origin = val.names() + " (" + val.format + ")";
    impl->warnings.insert(impl->warnings.end(), val.warnings.begin(), val.warnings.end());
  } else {
    split = split_validation_tail(data, train, model.seq_len);
  }
  impl->train = ShardSet(std::move(split.train), model.seq_len);
  impl->val = ShardSet(std::move(split.val), model.seq_len);
  impl->vocab_needed = vocab_needed;
  std::ostringstream describe;
  describe << source_name << ": " << train.names() << " (" << train.format << "), train " << impl->train.tokens()
           << " tokens, val " << impl->val.tokens() << " tokens (" << split.val_origin << "), order "
           << config::to_string(data.order) << " (" << impl->train.windows() << " windows of " << model.seq_len
           << " per epoch)";
  impl->description = describe.str();
  return Dataset(std::move(impl));
}

Dataset Dataset::open_validation(DataSource source, const std::vector<std::string>& paths,
                                 std::string_view config_key, const ModelSection& model) {
  FP8T_CHECK(source != DataSource::kSynthetic, "open_validation reads files (text or tokens)");
  FP8T_INPUT_CHECK(model.seq_len >= 1, "model.seq_len must be at least 1, got ", model.seq_len);
  FP8T_INPUT_CHECK(!paths.empty(), config_key, " must name the validation files");
  if (source == DataSource::kText) {
    FP8T_INPUT_CHECK(model.vocab_size >= kByteVocabSize, "text files are read as bytes (256 token ids), but "
                     "model.vocab_size is ", model.vocab_size);
  }
  const LoadedFiles val = load_data_files(source, paths, config_key, model);
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  impl->seq_len = model.seq_len;
  impl->vocab_size = model.vocab_size;
  impl->val = ShardSet(val.spans, model.seq_len);
  impl->vocab_needed = val.max_token + 1;
  std::ostringstream describe;
  describe << (source == DataSource::kText ? "text" : "tokens") << ": " << val.names() << " (" << val.format
           << "), " << impl->val.tokens() << " tokens, " << impl->val.windows() << " windows of " << model.seq_len;
  impl->description = describe.str();
  return Dataset(std::move(impl));
}

Batch Dataset::next_train(int64_t batch_size) {
  const Impl& d = *impl_;
  FP8T_CHECK(d.chain || d.train.windows() > 0, "next_train on a validation-only dataset");
  const uint64_t position = static_cast<uint64_t>(train_position_);
  // Row r of rank k is row k * B + r of the global batch, so W ranks of B rows draw exactly
  // the rows one process of W * B rows draws. (The 0 is a fixed field of the key layout.)
  auto key_of_row = [&](int64_t row) {
    return hash_key({d.seed, static_cast<uint64_t>(Stream::kTrain), 0, position,
                     static_cast<uint64_t>(d.rank * batch_size + row)});
  };
  Batch batch;
  if (d.chain) {
    batch = d.chain_batch(batch_size, key_of_row);
  } else {
    const int64_t first = windows_drawn_ + d.rank * batch_size;  // stream number of this rank's row 0
    std::vector<WindowAt> rows(static_cast<size_t>(batch_size));
    for (int64_t row = 0; row < batch_size; ++row) {
      rows[row] = d.order == DataOrder::kSequential
                      ? d.sequential_window(first + row)
                      : d.train.start(static_cast<int64_t>(
                            SplitMix64(key_of_row(row)).below(static_cast<uint64_t>(d.train.starts()))));
    }
    batch = d.window_batch(d.train, rows);
    if (d.window_log) d.window_log->write(first, rows);
  }
  ++train_position_;
  windows_drawn_ += batch_size * d.world_size;
  return batch;
}

Batch Dataset::val_batch(int64_t index, int64_t batch_size) const {
  FP8T_CHECK(index >= 0, "validation batch index must be non-negative, got ", index);
  const Impl& d = *impl_;
  // Row g of global validation batch `index`; rank k holds rows [k * B, (k + 1) * B).
  auto global_row = [&](int64_t row) { return d.rank * batch_size + row; };
  if (d.chain) {
    return d.chain_batch(batch_size, [&](int64_t row) {
      return hash_key({d.seed, static_cast<uint64_t>(Stream::kVal), static_cast<uint64_t>(index),
                       static_cast<uint64_t>(global_row(row))});
    });
  }
  // Consecutive non-overlapping windows, wrapping around when the validation data is exhausted.
  const int64_t windows = d.val.windows();  // >= 1 (checked at open)
  const int64_t rows_per_batch = batch_size * d.world_size;
  std::vector<WindowAt> rows(static_cast<size_t>(batch_size));
  for (int64_t row = 0; row < batch_size; ++row) {
    rows[row] = d.val.window((index % windows * (rows_per_batch % windows) + global_row(row)) % windows);
  }
  return d.window_batch(d.val, rows);
}

void Dataset::set_train_position(int64_t position) {
  FP8T_CHECK(position >= 0, "train position must be non-negative, got ", position);
  train_position_ = position;
}

void Dataset::set_windows_drawn(int64_t windows) {
  FP8T_CHECK(windows >= 0, "windows drawn must be non-negative, got ", windows);
  windows_drawn_ = windows;
}

std::optional<double> Dataset::epoch() const {
  if (impl_->chain) return std::nullopt;
  return static_cast<double>(windows_drawn_) / static_cast<double>(impl_->train.windows());
}

int64_t Dataset::tokens_seen() const { return windows_drawn_ * impl_->seq_len; }

int64_t Dataset::train_tokens() const { return impl_->train.tokens(); }

int64_t Dataset::tokens_per_epoch() const { return impl_->train.windows() * impl_->seq_len; }

int64_t Dataset::train_files() const { return static_cast<int64_t>(impl_->train.spans().size()); }

std::string Dataset::describe() const { return impl_->description; }

const std::vector<std::string>& Dataset::warnings() const { return impl_->warnings; }

std::optional<double> Dataset::entropy_floor_nats() const {
  if (impl_->chain) return impl_->chain->entropy_rate_nats();
  return std::nullopt;
}

int64_t Dataset::vocab_size_needed() const { return impl_->vocab_needed; }

int64_t Dataset::val_windows() const { return impl_->val.windows(); }

int64_t Dataset::seq_len() const { return impl_->seq_len; }

}  // namespace fp8t::data
