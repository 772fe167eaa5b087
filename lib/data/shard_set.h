// ShardSet: the token files of one config key (data.train_path or data.val_path) as one
// sequence of spans, and the windows cut from them.
//
// A window is seq_len + 1 consecutive tokens of one span (inputs, and targets shifted by one);
// no window straddles two files. Windows are numbered two ways:
//   starts:  every position a window can start at, span after span. data.order random draws
//            one uniformly; for a single file that is exactly the rule of a single span.
//   windows: non-overlapping windows, (size - 1) / seq_len per span, so that every token of a
//            span (but its first and a tail shorter than a window) is a target exactly once:
//            one epoch of data.order sequential, and the validation batches.
#pragma once

#include <cstdint>      // int64_t
#include <memory>       // std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include "lib/config/experiment.h"  // DataSource, ModelSection
#include "lib/data/token_store.h"   // TokenStore

namespace fp8t::data {

// Tokens [begin, end) of one loaded file.
struct TokenSpan {
  std::shared_ptr<const TokenStore> store;
  std::string path;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Where a window starts: span index and token index into that span's store.
struct WindowAt {
  int span = 0;
  int64_t offset = 0;
};

class ShardSet {
 public:
  ShardSet() = default;
  // Every span holds at least seq_len + 1 tokens (checked: a violation is a bug).
  ShardSet(std::vector<TokenSpan> spans, int64_t seq_len);

  const std::vector<TokenSpan>& spans() const { return spans_; }
  int64_t tokens() const { return tokens_; }
  int64_t starts() const { return starts_end_.empty() ? 0 : starts_end_.back(); }
  int64_t windows() const { return windows_end_.empty() ? 0 : windows_end_.back(); }
  // Start number u in [0, starts()) and window number w in [0, windows()).
  WindowAt start(int64_t u) const;
  WindowAt window(int64_t w) const;

 private:
  int64_t seq_len_ = 0;
  int64_t tokens_ = 0;
  std::vector<TokenSpan> spans_;
  std::vector<int64_t> starts_end_;   // cumulative starts after each span
  std::vector<int64_t> windows_end_;  // cumulative windows after each span
};

// The files of a data key, opened and validated in order: `entries` expanded (globs, lists;
// data_file.h), each file's format checked, its tokens checked against model.vocab_size and
// its length against one window (model.seq_len + 1), and token files against the manifest.json
// of their folder (shard_manifest.h). The first bad file stops it with a bad-input error naming
// the file and the key.
struct LoadedFiles {
  std::vector<TokenSpan> spans;  // each file whole
  std::string format;            // "llm.c shard v1 (uint16)", "bytes", or several joined by " + "
  int64_t max_token = -1;
  // Token files checked against prepare_data.py's manifest.json (shard_manifest.h): what the
  // run should say before training (one line each; refusals throw instead).
  std::vector<std::string> warnings;
  // "PATH" for one file, "N files FIRST .. LAST" for several.
  std::string names() const;
};
LoadedFiles load_data_files(DataSource source, const std::vector<std::string>& entries, std::string_view config_key,
                            const ModelSection& model);

}  // namespace fp8t::data
