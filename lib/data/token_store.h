// TokenStore: one contiguous array of tokens in the file's own width (uint8 bytes of a text
// file, uint16 GPT-2 tokens, uint32 Llama-3 tokens). Batches are cut from it by copying
// windows, so a 100M-token shard costs its file size in memory and nothing per batch.
#pragma once

#include <cstdint>  // int64_t, uint8_t, uint16_t, uint32_t
#include <variant>  // std::variant
#include <vector>   // std::vector

namespace fp8t::data {

class TokenStore {
 public:
  using Storage = std::variant<std::vector<uint8_t>, std::vector<uint16_t>, std::vector<uint32_t>>;

  TokenStore() = default;
  explicit TokenStore(Storage tokens);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t at(int64_t index) const;
  // Largest token id (-1 when empty); computed once at construction.
  int64_t max_token() const { return max_token_; }
  // Index of the first token >= limit, or -1 when there is none.
  int64_t find_first_at_least(int64_t limit) const;
  // Width of one stored token in bytes (1, 2 or 4).
  int element_bytes() const;

  // Copies tokens [start, start + length) as int64 into out. The caller keeps the range in
  // bounds (checked: a violation is a bug, not bad input).
  void copy_to(int64_t start, int64_t length, int64_t* out) const;

 private:
  Storage tokens_;
  int64_t size_ = 0;
  int64_t max_token_ = -1;
};

}  // namespace fp8t::data
