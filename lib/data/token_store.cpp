#include "lib/data/token_store.h"

#include <algorithm>  // std::max_element, std::find_if, std::copy_n

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::data {

TokenStore::TokenStore(Storage tokens) : tokens_(std::move(tokens)) {
  std::visit(
      [this](const auto& v) {
        size_ = static_cast<int64_t>(v.size());
        max_token_ = v.empty() ? -1 : static_cast<int64_t>(*std::max_element(v.begin(), v.end()));
      },
      tokens_);
}

int64_t TokenStore::at(int64_t index) const {
  FP8T_CHECK(index >= 0 && index < size_, "token index ", index, " out of range [0, ", size_, ")");
  return std::visit([index](const auto& v) { return static_cast<int64_t>(v[index]); }, tokens_);
}

int64_t TokenStore::find_first_at_least(int64_t limit) const {
  return std::visit(
      [limit](const auto& v) -> int64_t {
        auto it =
            std::find_if(v.begin(), v.end(), [limit](auto t) { return static_cast<int64_t>(t) >= limit; });
        return it == v.end() ? -1 : static_cast<int64_t>(it - v.begin());
      },
      tokens_);
}

int TokenStore::element_bytes() const {
  return std::visit([](const auto& v) { return static_cast<int>(sizeof(v[0])); }, tokens_);
}

void TokenStore::copy_to(int64_t start, int64_t length, int64_t* out) const {
  FP8T_CHECK(start >= 0 && length >= 0 && start + length <= size_, "token window [", start, ", ",
             start + length, ") out of range [0, ", size_, ")");
  // One widening copy; the compiler vectorizes it for every element width.
  std::visit([&](const auto& v) { std::copy_n(v.data() + start, length, out); }, tokens_);
}

}  // namespace fp8t::data
