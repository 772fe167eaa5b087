#include "lib/data/data_file.h"

#include <glob.h>          // ::glob, ::globfree
#include <sys/resource.h>  // ::getrlimit, ::setrlimit

#include <algorithm>   // std::sort
#include <filesystem>  // std::filesystem::status, file_size, weakly_canonical
#include <set>         // std::set

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fp8t::data {

namespace {

bool is_pattern(const std::string& entry) { return entry.find_first_of("*?[") != std::string::npos; }

// The sorted matches of a glob pattern (empty when nothing matches).
std::vector<std::string> glob_matches(const std::string& pattern, std::string_view config_key) {
  glob_t found{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  std::vector<std::string> out;
  for (size_t i = 0; rc == 0 && i < found.gl_pathc; ++i) out.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  FP8T_INPUT_CHECK(rc == 0 || rc == GLOB_NOMATCH, config_key, ": cannot expand the pattern '", pattern,
                   "' (a folder on its way is unreadable)");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool is_glob_pattern(const std::string& entry) {
  std::error_code ec;
  return is_pattern(entry) && !std::filesystem::is_regular_file(entry, ec);
}

std::vector<std::string> expand_data_paths(const std::vector<std::string>& entries, std::string_view config_key) {
  std::vector<std::string> paths;
  for (const std::string& entry : entries) {
    if (!is_glob_pattern(entry)) {
      paths.push_back(entry);
      continue;
    }
    const std::vector<std::string> matches = glob_matches(entry, config_key);
    FP8T_INPUT_CHECK(!matches.empty(), config_key, ": the pattern '", entry,
                     "' matches no file (relative patterns start at the working directory)");
    paths.insert(paths.end(), matches.begin(), matches.end());
  }
  std::set<std::string> seen;
  for (const std::string& path : paths) {
    std::error_code ec;
    const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
    FP8T_INPUT_CHECK(seen.insert(ec ? path : canonical).second, config_key, ": '", path,
                     "' is named twice (by two entries or two patterns); each file may appear once");
  }
  return paths;
}

void reserve_open_files(int64_t files, std::string_view config_key) {
  constexpr int64_t kSpare = 256;  // sockets, logs, checkpoints, libraries' own files
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const auto needed = static_cast<rlim_t>(files + kSpare);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return;
  FP8T_INPUT_CHECK(limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= needed, config_key, ": ", files,
                   " data files stay open while the run reads them, but the open-file limit is ", limit.rlim_max,
                   " (ulimit -Hn); raise it, or write fewer, larger shards");
  limit.rlim_cur = needed;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

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
