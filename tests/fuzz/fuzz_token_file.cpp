// libFuzzer target: the token-file reader (llm.c shards, nanoGPT .bin) and the text reader,
// through a file in /dev/shm as fp8train opens them. Any input must be read (and every token be
// addressable) or refused with ExitCode::kBadInput.
#include <unistd.h>  // getpid

#include <cstdint>  // uint8_t
#include <cstdio>   // std::FILE
#include <cstdlib>  // std::abort
#include <string>   // std::string

#include "lib/data/text_source.h"  // data::read_text_file
#include "lib/data/token_file.h"   // data::read_token_file
#include "lib/util/error.h"        // fp8t::Error

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/fp8t_fuzz_" + std::to_string(::getpid()) + ".bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const auto file = fp8t::data::read_token_file(path, "data.train_path");
    for (int64_t i = 0; i < file.tokens.size(); i += 97) (void)file.tokens.at(i);
    if (file.tokens.size() > 0) (void)file.tokens.at(file.tokens.size() - 1);
  } catch (const fp8t::Error& e) {
    if (e.code() != fp8t::ExitCode::kBadInput) std::abort();
  }
  try {
    (void)fp8t::data::read_text_file(path, "data.train_path");
  } catch (const fp8t::Error& e) {
    if (e.code() != fp8t::ExitCode::kBadInput) std::abort();
  }
  return 0;
}
