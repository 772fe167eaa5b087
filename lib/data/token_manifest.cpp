#include "lib/data/token_manifest.h"

#include <nlohmann/json.hpp>  // nlohmann::json

#include <fstream>       // std::ifstream
#include <set>           // std::set
#include <system_error>  // std::error_code

#include "lib/util/error.h"  // FP8T_INPUT_CHECK

namespace fs = std::filesystem;

namespace fp8t::data {

namespace {

// "tokenizer": one path (tokenizer.json), or [vocab.json, merges.txt]: shown as written.
std::string tokenizer_text(const nlohmann::json& t) {
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array()) return t.dump();
  std::string out;
  for (const nlohmann::json& part : t) {
    out += (out.empty() ? "" : " + ") + (part.is_string() ? part.get<std::string>() : part.dump());
  }
  return out;
}

}  // namespace

std::optional<TokenManifest> manifest_beside(const fs::path& file) {
  const fs::path path = fs::absolute(file).parent_path() / "manifest.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  FP8T_INPUT_CHECK(in.good(), "cannot read ", path.string());
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("vocab_size") || !j.contains("shards")) return std::nullopt;  // not ours
  FP8T_INPUT_CHECK(j["vocab_size"].is_number_integer() && j["vocab_size"].get<int64_t>() > 0, path.string(),
                   ": \"vocab_size\" must be a positive integer, got ", j["vocab_size"].dump());
  TokenManifest m;
  m.path = path;
  m.vocab_size = j["vocab_size"].get<int64_t>();
  m.tokenizer = j.contains("tokenizer") ? tokenizer_text(j["tokenizer"]) : std::string("an unnamed tokenizer");
  if (j.contains("separator") && j["separator"].is_object() && j["separator"].contains("id") &&
      j["separator"]["id"].is_number_integer()) {
    m.separator_id = j["separator"]["id"].get<int64_t>();
  }
  return m;
}

std::vector<TokenManifest> manifests_beside(const std::vector<std::string>& files) {
  std::vector<TokenManifest> out;
  std::set<fs::path> folders;
  for (const std::string& f : files) {
    if (!folders.insert(fs::absolute(f).parent_path()).second) continue;
    if (auto m = manifest_beside(f)) out.push_back(std::move(*m));
  }
  return out;
}

}  // namespace fp8t::data
