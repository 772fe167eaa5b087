// A fresh temporary folder per test, removed with its contents at scope exit.
#pragma once

#include <ftw.h>     // nftw (recursive removal)
#include <stdio.h>   // remove
#include <unistd.h>  // getpid

#include <algorithm>     // std::sort
#include <atomic>        // std::atomic
#include <filesystem>    // std::filesystem
#include <string>        // std::string
#include <system_error>  // std::error_code
#include <vector>        // std::vector

namespace fp8t::test {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("fp8t_test_" + tag + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    remove_tree(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  // File names directly inside `dir`, sorted.
  static std::vector<std::string> list(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 // Removes `root` and everything below it (no error when missing). POSIX nftw rather than
  // std::filesystem::remove_all: a LibTorch build that exports its own, broken copy of
  // remove_all (seen with the 2.11 wheel on the GPU machine) would otherwise crash here.
  static void remove_tree(const std::filesystem::path& root) {
    ::nftw(
        root.c_str(),
        [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); },
        16, FTW_DEPTH | FTW_PHYS);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace fp8t::test
