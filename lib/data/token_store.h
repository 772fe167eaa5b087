// TokenStore: one contiguous array of tokens in the file's own width (uint8 bytes of a text
// file, uint16 GPT-2 tokens, uint32 Llama-3 tokens). Batches are cut from it by copying
// windows. Token files are not loaded: the store keeps the file open and reads each window
// with pread (open_file), so opening a shard costs neither its size in RAM nor a full read, and
// the pages a batch touches stay reclaimable page cache. Reading rather than memory-mapping
// also means that a file truncated while the run reads it is a short read, reported as an error
// that names the file, and not a SIGBUS that kills the process.
#pragma once

#include <cstdint>      // int64_t, uint8_t, uint16_t, uint32_t
#include <memory>       // std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <variant>      // std::variant
#include <vector>       // std::vector

namespace fp8t::data {

class TokenStore {
 public:
  using Storage = std::variant<std::vector<uint8_t>, std::vector<uint16_t>, std::vector<uint32_t>>;

  TokenStore() = default;
  // Tokens held in memory.
  explicit TokenStore(Storage tokens);
  // `count` tokens of `width` bytes (2 or 4, little endian) at byte `offset` of `path`, read on
  // demand from the file kept open. The largest token is found by reading the file in bounded
  // chunks (so memory stays small) and skipping holes of sparse files, which read as token 0.
  // Errors (bad input) name `path` and `config_key`.
  static TokenStore open_file(const std::string& path, uint64_t offset, int64_t count, int width,
                              std::string_view config_key);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t at(int64_t index) const;
  // Largest token id (-1 when empty); computed once at construction.
  int64_t max_token() const { return max_token_; }
  // Index of the first token >= limit, or -1 when there is none.
  int64_t find_first_at_least(int64_t limit) const;
  // Width of one stored token in bytes (1, 2 or 4).
  int element_bytes() const { return width_; }
  // Whether the tokens are read from the file on demand (not a copy in memory).
  bool file_backed() const { return file_ != nullptr; }
  // The file the tokens are read from ("" for tokens in memory).
  const std::string& path() const;

  // Copies tokens [start, start + length) as int64 into out. The caller keeps the range in
  // bounds (checked: a violation is a bug, not bad input). A file that has become shorter than
  // the range needs (truncated or rewritten since it was opened) throws fp8t::Error
  // (kTrainingFailed) naming the file. Safe to call from several threads at once.
  void copy_to(int64_t start, int64_t length, int64_t* out) const;

 private:
  struct OpenFile;  // the descriptor and path of a file-backed store
  std::shared_ptr<const void> owner_;  // the vector that data_ points into
  std::shared_ptr<const OpenFile> file_;
  const void* data_ = nullptr;
  uint64_t offset_ = 0;  // byte offset of token 0 in the file
  int width_ = 1;
  int64_t size_ = 0;
  int64_t max_token_ = -1;
};

}  // namespace fp8t::data
