// What every rank of a data-parallel job must agree on (lib/dist/fingerprint.h): the resolved
// config, key by key, and every file the run reads (the data files and model.init_from), each
// by its size and CRC32Cs of its first 64 KiB and of 16 evenly spaced 4 KiB samples: enough to
// tell two different files apart at the cost of a few reads, however large they are.
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <string>      // std::string
#include <vector>      // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/config/experiment.h"  // ExperimentConfig, DataSection
#include "lib/dist/fingerprint.h"   // dist::FingerprintItem

namespace fp8t::train {

// A file the run reads, and the key that names it.
struct InputFile {
  std::string key;  // "data.train_path"
  std::filesystem::path path;
};

// The files the resolved config reads: the data section's (data.train_path, data.val_path for
// the text and token sources) and model.init_from. The one list of them: when a key names
// several files, each is listed here.
std::vector<InputFile> input_files(const ExperimentConfig& cfg);

// "size 1048576 B, head crc32c 0x..., samples crc32c 0x..." ("missing" when it cannot be read).
std::string file_fingerprint(const std::filesystem::path& path);

// Every config key ("config key <key>" -> its value) and every input file ("file <path> (<key>)").
std::vector<dist::FingerprintItem> job_fingerprint(const ExperimentConfig& cfg);

// What a checkpoint records of the data it was trained on (its meta "data_files"): every file
// of data.train_path and data.val_path in order, as {key, path, fingerprint} (file_fingerprint:
// a few reads per file however large, so a resume of a terabyte corpus stays instant). Empty
// for the synthetic source. It tells a replaced, re-tokenized, truncated, extended, added,
// removed or reordered file from the one trained on; an in-place edit of bytes that no sample
// covers is not seen (token files are written whole by the tools that make them).
nlohmann::json data_record(const ExperimentConfig& cfg);

// How the files of `now` differ from the `recorded` ones (both data_record()s), one line per
// file ("data.train_path: 'b.bin' holds other data: ...", "... is new", "... is no longer
// named"), or one line when only their order changed; empty when they agree.
std::vector<std::string> data_record_changes(const nlohmann::json& recorded, const nlohmann::json& now);

}  // namespace fp8t::train
