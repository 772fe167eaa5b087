#include "lib/data/shard_manifest.h"

#include <fmt/format.h>       // fmt::format
#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>  // std::filesystem::path, is_regular_file
#include <fstream>     // std::ifstream
#include <map>         // std::map
#include <optional>    // std::optional
#include <set>         // std::set

#include "lib/util/error.h"  // FP8T_THROW

namespace fs = std::filesystem;

namespace fp8t::data {
namespace {

// One shard as the manifest lists it.
struct Listed {
  std::string split;
  int64_t tokens = -1;  // -1: not recorded
};

struct Manifest {
  fs::path path;
  std::map<std::string, Listed> shards;  // file name -> entry, in file-name order
};

// The split a key reads: data.train_path "train", data.val_path "val", others none.
std::string split_of(std::string_view key) {
  if (key == "data.train_path") return "train";
  if (key == "data.val_path") return "val";
  return "";
}

// The manifest in `folder`; nothing when there is none. A manifest.json that cannot be parsed or
// is not prepare_data.py's gives a warning and nothing.
std::optional<Manifest> read_manifest(const fs::path& folder, std::string_view key, std::vector<std::string>& warnings) {
  const fs::path path = folder / kManifestFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("shards") || !j["shards"].is_array()) {
    warnings.push_back(fmt::format("{}: {} is not a manifest of scripts/prepare_data.py (no \"shards\" list); the "
                                   "token files beside it are not checked against it", key, path.string()));
    return std::nullopt;
  }
  Manifest m{path, {}};
  for (const nlohmann::json& s : j["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string()) continue;
    Listed listed;
    if (s.contains("split") && s["split"].is_string()) listed.split = s["split"].get<std::string>();
    if (s.contains("tokens") && s["tokens"].is_number_integer()) listed.tokens = s["tokens"].get<int64_t>();
    m.shards[s["file"].get<std::string>()] = listed;
  }
  return m;
}

// A named file against its manifest entry: refused when unlisted or of another length, warned
// when of the other split.
void check_listed(const Manifest& m, const TokenSpan& span, const std::string& name, const std::string& split,
                  std::string_view key, std::vector<std::string>& warnings) {
  const auto it = m.shards.find(name);
  if (it == m.shards.end()) {
    FP8T_THROW(ExitCode::kBadInput, key, ": '", span.path, "' is not listed in ", m.path.string(), " (", m.shards.size(),
               " shards written by scripts/prepare_data.py): a file left from another preparation or copied in "
               "later? Remove it or narrow ", key, ", or prepare the folder again");
  }
  const Listed& listed = it->second;
  if (listed.tokens >= 0 && listed.tokens != span.size()) {
    FP8T_THROW(ExitCode::kBadInput, key, ": '", span.path, "' holds ", span.size(), " tokens but ", m.path.string(),
               " lists it with ", listed.tokens, ": it is not the shard scripts/prepare_data.py wrote (replaced or "
               "rewritten since?); restore it, or prepare the folder again");
  }
  if (!split.empty() && !listed.split.empty() && listed.split != split) {
    warnings.push_back(fmt::format("{}: '{}' is a {} shard in {}{}", key, span.path, listed.split, m.path.string(),
                                   listed.split == "val" ? ": training on it leaves the validation data not held out"
                                                         : ", not a validation shard"));
  }
}

// The shards of `split` the manifest lists that the key does not name.
void warn_unnamed(const Manifest& m, const std::set<std::string>& named, const std::string& split,
                  std::string_view key, std::vector<std::string>& warnings) {
  std::vector<std::string> unnamed, missing;
  int64_t of_split = 0;
  for (const auto& [file, listed] : m.shards) {
    if (listed.split != split) continue;
    ++of_split;
    if (named.count(file) > 0) continue;
    std::error_code ec;
    (fs::is_regular_file(m.path.parent_path() / file, ec) ? unnamed : missing).push_back(file);
  }
  if (unnamed.empty() && missing.empty()) return;
  auto first = [](const std::vector<std::string>& files) {
    std::string out;
    for (size_t i = 0; i < files.size() && i < 3; ++i) out += (i ? ", " : "") + files[i];
    return files.size() > 3 ? out + fmt::format(" and {} more", files.size() - 3) : out;
  };
  std::string what = fmt::format("{}: trains on {} of the {} {} shards {} lists", key,
                                 of_split - static_cast<int64_t>(unnamed.size() + missing.size()), of_split, split,
                                 m.path.string());
  if (!missing.empty()) what += fmt::format("; missing from the folder: {}", first(missing));
  if (!unnamed.empty()) what += fmt::format("; present but not named by {}: {}", key, first(unnamed));
  warnings.push_back(what);
}

}  // namespace

std::vector<std::string> check_shard_manifests(const std::vector<TokenSpan>& spans, bool from_pattern,
                                               std::string_view key) {
  std::vector<std::string> warnings;
  const std::string split = split_of(key);
  // The files of each folder, in the order of the key.
  std::map<fs::path, std::vector<const TokenSpan*>> by_folder;
  for (const TokenSpan& span : spans) {
    fs::path folder = fs::path(span.path).parent_path().lexically_normal();
    by_folder[folder.empty() ? fs::path(".") : folder].push_back(&span);
  }
  for (const auto& [folder, files] : by_folder) {
    const std::optional<Manifest> manifest = read_manifest(folder, key, warnings);
    if (!manifest) {
      if (from_pattern) {
        warnings.push_back(fmt::format("{}: {} token file(s) in '{}' and no {} (not written by "
                                       "scripts/prepare_data.py): a shard missing from the folder cannot be "
                                       "noticed; training on the {} the pattern matches",
                                       key, files.size(), folder.string(), kManifestFile, files.size()));
      }
      continue;
    }
    std::set<std::string> named;
    for (const TokenSpan* span : files) {
      const std::string name = fs::path(span->path).filename().string();
      check_listed(*manifest, *span, name, split, key, warnings);
      named.insert(name);
    }
    if (!split.empty()) warn_unnamed(*manifest, named, split, key, warnings);
  }
  return warnings;
}

}  // namespace fp8t::data
