// manifest.json: the record scripts/prepare_data.py writes beside its token shards,
//   {"shards": [{"file": "data_train_000001.bin", "split": "train", "tokens": 1500, ...}], ...}
// (file names relative to the manifest's folder). The token files a data key names are checked
// against the manifest of each folder they are in, so that a shard left from another
// preparation, a shard replaced by another, or a pattern that silently matches only part of
// the shards is seen before training:
//   refused (bad input naming the file, the manifest and the key): a file the manifest does not
//     list, or one whose token count is not the manifest's;
//   warned: the shards of the key's split that the manifest lists but the key does not name
//     (missing from the folder, or left out by the pattern); a training file that the manifest
//     calls validation (or the reverse); token files matched by a pattern in a folder without
//     manifest.json (files written by other tools: nothing to check their number against).
// Files named one by one without a manifest (a user's own token file) pass without a word, and
// a manifest.json that is not prepare_data.py's (no "shards" list) is warned about and ignored.
#pragma once

#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include "lib/data/shard_set.h"  // TokenSpan

namespace fp8t::data {

inline constexpr const char* kManifestFile = "manifest.json";

// Checks `spans` (the token files of `config_key`, in order) against their folders' manifests.
// `from_pattern`: a glob of the key matched some of them. Returns the warnings (one line each);
// throws fp8t::Error (kBadInput) for a refused file.
std::vector<std::string> check_shard_manifests(const std::vector<TokenSpan>& spans, bool from_pattern,
                                               std::string_view config_key);

}  // namespace fp8t::data
