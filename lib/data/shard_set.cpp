#include "lib/data/shard_set.h"

#include <algorithm>  // std::upper_bound, std::max, std::find, std::any_of

#include "lib/data/data_file.h"    // expand_data_paths, reserve_open_files, is_glob_pattern
#include "lib/data/shard_manifest.h"  // check_shard_manifests
#include "lib/data/text_source.h"  // read_text_file
#include "lib/data/token_file.h"   // read_token_file, format_name
#include "lib/util/error.h"        // FP8T_CHECK, FP8T_INPUT_CHECK, FP8T_THROW

namespace fp8t::data {

namespace {

// Index of the span whose cumulative range holds n: the first end > n.
int span_of(const std::vector<int64_t>& ends, int64_t n) {
  return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), n) - ends.begin());
}

// One file opened and checked (format, vocabulary, length), with its format's name.
TokenSpan load_file(DataSource source, const std::string& path, std::string_view key, const ModelSection& model,
                    std::string& format) {
  std::shared_ptr<const TokenStore> store;
  if (source == DataSource::kText) {
    store = std::make_shared<const TokenStore>(read_text_file(path, key));
    format = "bytes";
  } else {
    TokenFile tokens = read_token_file(path, key);
    store = std::make_shared<const TokenStore>(std::move(tokens.tokens));
    format = format_name(tokens.format);
  }
  FP8T_INPUT_CHECK(!store->empty(), key, ": '", path, "' holds no tokens");
  if (store->max_token() >= model.vocab_size) {
    const int64_t at = store->find_first_at_least(model.vocab_size);
    FP8T_THROW(ExitCode::kBadInput, key, ": '", path, "' holds token ", store->at(at), " at position ", at,
               ", but model.vocab_size is ", model.vocab_size, " (the largest token in the file is ",
               store->max_token(), ", so model.vocab_size must be at least ", store->max_token() + 1,
               ", or the tokens were made by another tokenizer than the model's)");
  }
  const int64_t needed = model.seq_len + 1;
  FP8T_INPUT_CHECK(store->size() >= needed, key, ": '", path, "' holds ", store->size(),
                   " tokens, fewer than the ", needed, " (model.seq_len + 1) one window needs");
  return {store, path, 0, store->size()};
}

}  // namespace

ShardSet::ShardSet(std::vector<TokenSpan> spans, int64_t seq_len) : seq_len_(seq_len), spans_(std::move(spans)) {
  int64_t starts = 0, windows = 0;
  for (const TokenSpan& s : spans_) {
    FP8T_CHECK(s.size() >= seq_len + 1, "a span of ", s.size(), " tokens holds no window of ", seq_len + 1);
    tokens_ += s.size();
    starts += s.size() - seq_len;
    windows += (s.size() - 1) / seq_len;
    starts_end_.push_back(starts);
    windows_end_.push_back(windows);
  }
}

WindowAt ShardSet::start(int64_t u) const {
  FP8T_CHECK(u >= 0 && u < starts(), "window start ", u, " out of range [0, ", starts(), ")");
  const int span = span_of(starts_end_, u);
  const int64_t first = span == 0 ? 0 : starts_end_[span - 1];
  return {span, spans_[span].begin + (u - first)};
}

WindowAt ShardSet::window(int64_t w) const {
  FP8T_CHECK(w >= 0 && w < windows(), "window ", w, " out of range [0, ", windows(), ")");
  const int span = span_of(windows_end_, w);
  const int64_t first = span == 0 ? 0 : windows_end_[span - 1];
  return {span, spans_[span].begin + (w - first) * seq_len_};
}

std::string LoadedFiles::names() const {
  if (spans.size() == 1) return spans.front().path;
  return std::to_string(spans.size()) + " files " + spans.front().path + " .. " + spans.back().path;
}

LoadedFiles load_data_files(DataSource source, const std::vector<std::string>& entries, std::string_view key,
                            const ModelSection& model) {
  const std::vector<std::string> paths = expand_data_paths(entries, key);
  if (source == DataSource::kTokens) reserve_open_files(static_cast<int64_t>(paths.size()), key);
  LoadedFiles files;
  std::vector<std::string> formats;
  for (const std::string& path : paths) {
    std::string format;
    files.spans.push_back(load_file(source, path, key, model, format));
    files.max_token = std::max(files.max_token, files.spans.back().store->max_token());
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) formats.push_back(format);
  }
  for (const std::string& format : formats) files.format += (files.format.empty() ? "" : " + ") + format;
  if (source == DataSource::kTokens) {
    const bool from_pattern = std::any_of(entries.begin(), entries.end(), is_glob_pattern);
    files.warnings = check_shard_manifests(files.spans, from_pattern, key);
  }
  return files;
}

}  // namespace fp8t::data
