// What every rank of a data-parallel job must agree on (lib/dist/fingerprint.h): the resolved
// config, key by key, and every file the run reads (the data files and model.init_from), each
// by its size and CRC32Cs of its first 64 KiB and of 16 evenly spaced 4 KiB samples: enough to
// tell two different files apart at the cost of a few reads, however large they are.
#pragma once

#include <cstdint>     // int64_t
#include <filesystem>  // std::filesystem::path
#include <string>      // std::string
#include <vector>      // std::vector

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

}  // namespace fp8t::train
