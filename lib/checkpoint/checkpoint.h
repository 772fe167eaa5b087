// Checkpoint files: named tensors plus JSON metadata, in one file written atomically.
//
// Format: the zip container that torch::pickle_save writes (documented by LibTorch as loadable
// with torch.load in Python; not tested here), holding one
// dict {"format": "fp8train-checkpoint", "version": 1, "meta": <JSON text>,
//       "tensors": {name: tensor}}.
// Integrity (version 2): the zip payload is followed by a 24-byte trailer — "FP8TCRC1", the
// payload size and the payload's CRC32C (lib/util/crc32c.h), little endian — written as the
// bytes stream out and verified over the whole file before anything is parsed. Any flipped,
// missing or extra byte is reported as a "corrupt checkpoint" (kBadInput).
// Tensors are stored with their dtype and shape (CUDA tensors are copied to the host while
// writing; a tensor that views part of a larger storage is stored compactly). Loading always
// returns CPU tensors; the caller copies them to their devices.
#pragma once

#include <cstdint>     // uint32_t
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <string>      // std::string

#include <ATen/core/Tensor.h>   // at::Tensor
#include <nlohmann/json.hpp>    // nlohmann::json

namespace fp8t::checkpoint {

struct Checkpoint {
  std::map<std::string, at::Tensor> tensors;
  nlohmann::json meta;  // anything JSON: step, config, RNG seeds, ...
  uint32_t crc32c = 0;  // load_checkpoint: the file's verified checksum (0 for version 1 files)
};

// Writes `ckpt` to `path` atomically (lib/run/run_dir.h write_file_atomic): a crash or error
// mid-write leaves the previous file at `path` intact. Which older checkpoints are kept is the
// caller's policy (lib/train/train_checkpoint.h, names in lib/run/checkpoint_files.h). Throws
// fp8t::Error (kFailure, naming the path) on I/O errors. Returns the CRC32C written into the
// trailer (a manifest can record it).
uint32_t save_checkpoint(const std::filesystem::path& path, const Checkpoint& ckpt);

// Reads a checkpoint written by save_checkpoint, verifying its checksum first. Throws
// fp8t::Error (kBadInput, naming the path) when the file is missing, unreadable, corrupt or not
// an fp8train checkpoint; "corrupt checkpoint ..." adds the --resume-from that continues from
// the newest checkpoint the folder keeps. Version 1 files (no checksum) load with a warning.
Checkpoint load_checkpoint(const std::filesystem::path& path);

}  // namespace fp8t::checkpoint
