#include "lib/data/data_file.h"

#include <filesystem>  // std::filesystem::status, file_size

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fp8t::data {

uint64_t checked_file_size(const std::string& path, std::string_view config_key) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  FP8T_INPUT_CHECK(fs::exists(status), config_key, ": data file '", path,
                   "' does not exist (check the path, relative paths start at the working directory)");
  FP8T_INPUT_CHECK(fs::is_regular_file(status), config_key, ": '", path, "' is not a regular file");
  const uint64_t size = fs::file_size(path, ec);
  FP8T_INPUT_CHECK(!ec, config_key, ": cannot read the size of '", path, "': ", ec.message());
  FP8T_INPUT_CHECK(size > 0, config_key, ": data file '", path, "' is empty");
  return size;
}

std::ifstream open_binary(const std::string& path, std::string_view config_key) {
  std::ifstream in(path, std::ios::binary);
  FP8T_INPUT_CHECK(in.good(), config_key, ": cannot open data file '", path, "' for reading");
  return in;
}

void read_exact(std::ifstream& in, void* dst, std::size_t bytes, const std::string& path) {
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
  FP8T_INPUT_CHECK(in.gcount() == static_cast<std::streamsize>(bytes), "data file '", path, "': read ",
                   in.gcount(), " of ", bytes, " bytes (file changed or unreadable?)");
}

}  // namespace fp8t::data
