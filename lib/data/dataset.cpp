#include "lib/data/dataset.h"

#include <ATen/Parallel.h>  // at::parallel_for

#include <algorithm>  // std::max
#include <cmath>      // std::llround
#include <iomanip>    // std::setprecision
#include <sstream>    // std::ostringstream
#include <vector>     // std::vector

#include "lib/data/counter_rng.h"   // hash_key, SplitMix64, Stream
#include "lib/data/markov_chain.h"  // MarkovChain
#include "lib/data/text_source.h"   // read_text_file, kByteVocabSize
#include "lib/data/token_file.h"    // read_token_file, format_name
#include "lib/data/token_store.h"   // TokenStore
#include "lib/util/error.h"         // FP8T_CHECK, FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::data {

namespace {

constexpr const char* kTrainKey = "data.train_path";
constexpr const char* kValKey = "data.val_path";

// A half-open slice [begin, end) of a loaded file.
struct TokenRange {
  std::shared_ptr<const TokenStore> store;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

struct LoadedFile {
  std::shared_ptr<const TokenStore> store;
  std::string format;  // for describe()
};

LoadedFile load(DataSource source, const std::string& path, const char* key, const ModelSection& model) {
  LoadedFile file;
  if (source == DataSource::kText) {
    file.store = std::make_shared<const TokenStore>(read_text_file(path, key));
    file.format = "bytes";
  } else {
    TokenFile tokens = read_token_file(path, key);
    file.store = std::make_shared<const TokenStore>(std::move(tokens.tokens));
    file.format = format_name(tokens.format);
  }
  const TokenStore& store = *file.store;
  FP8T_INPUT_CHECK(!store.empty(), key, ": '", path, "' holds no tokens");
  if (store.max_token() >= model.vocab_size) {
    const int64_t at = store.find_first_at_least(model.vocab_size);
    FP8T_THROW(ExitCode::kBadInput, key, ": '", path, "' holds token ", store.at(at), " at position ", at,
               ", but model.vocab_size is ", model.vocab_size, " (the largest token in the file is ",
               store.max_token(), ", so model.vocab_size must be at least ", store.max_token() + 1, ")");
  }
  const int64_t needed = model.seq_len + 1;
  FP8T_INPUT_CHECK(store.size() >= needed, key, ": '", path, "' holds ", store.size(),
                   " tokens, fewer than the ", needed, " (model.seq_len + 1) one window needs");
  return file;
}

}  // namespace

struct Dataset::Impl {
  DataSource source = DataSource::kSynthetic;
  int64_t seq_len = 0;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  std::optional<MarkovChain> chain;  // synthetic
  TokenRange train;                  // text / tokens
  TokenRange val;
  int64_t vocab_needed = 0;
  std::string description;

  // Synthetic batch: row r is the chain's walk for key_of_row(r).
  template <typename KeyOfRow>
  Batch chain_batch(int64_t batch_size, KeyOfRow&& key_of_row) const;
  // File batch: row r is the window of `range` that starts start_of_row(r) tokens into it.
  template <typename StartOfRow>
  Batch window_batch(const TokenRange& range, int64_t batch_size, StartOfRow&& start_of_row) const;
  // An empty [batch_size, T] batch and fill_rows(begin, end, inputs, targets) over row chunks.
  template <typename RowsFiller>
  Batch make_batch(int64_t batch_size, RowsFiller&& fill_rows) const;
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

template <typename StartOfRow>
Batch Dataset::Impl::window_batch(const TokenRange& range, int64_t batch_size,
                                  StartOfRow&& start_of_row) const {
  return make_batch(batch_size, [&](int64_t begin, int64_t end, int64_t* inputs, int64_t* targets) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t start = range.begin + start_of_row(row);
      range.store->copy_to(start, seq_len, inputs + row * seq_len);
      range.store->copy_to(start + 1, seq_len, targets + row * seq_len);
    }
  });
}

Dataset Dataset::open(const DataSection& data, const ModelSection& model, uint64_t seed, int rank,
                      int world_size) {
  FP8T_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "bad data-parallel rank ", rank,
             " of world size ", world_size);
  FP8T_INPUT_CHECK(model.seq_len >= 1, "model.seq_len must be at least 1, got ", model.seq_len);
  FP8T_INPUT_CHECK(model.vocab_size >= 2, "model.vocab_size must be at least 2, got ", model.vocab_size);

  auto impl = std::make_shared<Impl>();
  impl->source = data.source;
  impl->seq_len = model.seq_len;
  impl->seed = seed;
  impl->rank = rank;
  impl->world_size = world_size;
  std::ostringstream describe;

  if (data.source == DataSource::kSynthetic) {
    impl->chain = MarkovChain::random(model.vocab_size, seed);
    impl->vocab_needed = model.vocab_size;  // the chain is irreducible: every token occurs
    describe << "synthetic: random first-order Markov chain over " << model.vocab_size << " tokens ("
             << MarkovChain::kMinSuccessors << "-" << MarkovChain::kMaxSuccessors << " successors each, seed "
             << seed << "), windows generated on the fly; entropy floor " << std::fixed
             << std::setprecision(4) << impl->chain->entropy_rate_nats() << " nats";
    impl->description = describe.str();
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
  const int64_t needed = model.seq_len + 1;

  const LoadedFile train = load(data.source, data.train_path, kTrainKey, model);
  const int64_t n = train.store->size();
  std::string val_origin;
  int64_t vocab_needed = train.store->max_token() + 1;
  if (!data.val_path.empty()) {
    const LoadedFile val = load(data.source, data.val_path, kValKey, model);
    impl->train = {train.store, 0, n};
    impl->val = {val.store, 0, val.store->size()};
    vocab_needed = std::max(vocab_needed, val.store->max_token() + 1);
    val_origin = data.val_path + " (" + val.format + ")";
  } else {
    FP8T_INPUT_CHECK(data.val_fraction > 0.0 && data.val_fraction < 1.0,
                     "data.val_fraction must be in (0, 1) when data.val_path is not set (got ",
                     data.val_fraction, "): validation is the tail of ", kTrainKey);
    // Contiguous tail rather than scattered windows: no window straddles train and val text.
    const int64_t n_val = std::llround(static_cast<double>(n) * data.val_fraction);
    const int64_t n_train = n - n_val;
    FP8T_INPUT_CHECK(n_val >= needed, kTrainKey, ": the validation tail of '", data.train_path,
                     "' (data.val_fraction ", data.val_fraction, " of ", n, " tokens) holds ", n_val,
                     " tokens, fewer than the ", needed,
                     " (model.seq_len + 1) one window needs; raise data.val_fraction or set ", kValKey);
    FP8T_INPUT_CHECK(n_train >= needed, kTrainKey, ": after holding out the last ", n_val, " tokens of '",
                     data.train_path, "' for validation (data.val_fraction ", data.val_fraction, "), ",
                     n_train, " tokens remain for training, fewer than the ", needed,
                     " (model.seq_len + 1) one window needs; lower data.val_fraction or set ", kValKey);
    impl->train = {train.store, 0, n_train};
    impl->val = {train.store, n_train, n};
    std::ostringstream origin;
    origin << "last " << data.val_fraction * 100.0 << "% of " << kTrainKey;
    val_origin = origin.str();
  }
  impl->vocab_needed = vocab_needed;
  describe << source_name << ": " << data.train_path << " (" << train.format << "), train "
           << impl->train.size() << " tokens, val " << impl->val.size() << " tokens (" << val_origin << ")";
  impl->description = describe.str();
  return Dataset(std::move(impl));
}

Batch Dataset::next_train(int64_t batch_size) {
  const Impl& d = *impl_;
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
    const uint64_t starts = static_cast<uint64_t>(d.train.size() - d.seq_len);  // >= 1 (checked at open)
    batch = d.window_batch(d.train, batch_size, [&](int64_t row) {
      return static_cast<int64_t>(SplitMix64(key_of_row(row)).below(starts));
    });
  }
  ++train_position_;
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
  // Consecutive non-overlapping windows, wrapping around when the tail is exhausted.
  const int64_t windows = (d.val.size() - 1) / d.seq_len;  // >= 1 (checked at open)
  const int64_t rows_per_batch = batch_size * d.world_size;
  return d.window_batch(d.val, batch_size, [&](int64_t row) {
    return (index % windows * (rows_per_batch % windows) + global_row(row)) % windows * d.seq_len;
  });
}

void Dataset::set_train_position(int64_t position) {
  FP8T_CHECK(position >= 0, "train position must be non-negative, got ", position);
  train_position_ = position;
}

std::string Dataset::describe() const { return impl_->description; }

std::optional<double> Dataset::entropy_floor_nats() const {
  if (impl_->chain) return impl_->chain->entropy_rate_nats();
  return std::nullopt;
}

int64_t Dataset::vocab_size_needed() const { return impl_->vocab_needed; }

int64_t Dataset::seq_len() const { return impl_->seq_len; }

}  // namespace fp8t::data
