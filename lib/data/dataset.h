// Dataset: deterministic [B, T] next-token batches for training and evaluation.
//
// Three sources (data.source): `synthetic` (a random Markov chain drawn from the seed; no
// files), `text` (a file's bytes) and `tokens` (an llm.c shard or a nanoGPT .bin).
//
// Determinism: every window is a pure function of a key, never of generator state.
//   training row r of draw p on rank k with B rows per rank: global row g = k * B + r, key
//     (seed, train, p, g), so W ranks of B rows draw exactly the rows one process of W * B rows
//     draws. For files the key picks a random start in the training part; for synthetic data it
//     seeds the chain's walk.
//   validation batch i, row r on rank k of world W: global row g = k * B + r of batch i, so W
//     ranks of B rows evaluate exactly the rows one rank of W * B rows would. For files these
//     are consecutive non-overlapping windows of the validation part (independent of the
//     seed, so runs with different seeds are evaluated on the same text); for synthetic data
//     they come from a stream disjoint from training.
// The train position counts next_train calls; saving and restoring it resumes exactly.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <cstdint>   // int64_t, uint64_t
#include <memory>    // std::shared_ptr
#include <optional>  // std::optional
#include <string>    // std::string

#include "lib/config/experiment.h"  // DataSection, ModelSection

namespace fp8t::data {

// One batch of windows: targets[b, t] is the token after inputs[b, t].
struct Batch {
  at::Tensor inputs;   // int64 [B, T], CPU, contiguous
  at::Tensor targets;  // int64 [B, T], CPU, contiguous
};

class Dataset {
 public:
  // Loads and validates the data (bad files and settings throw ExitCode::kBadInput naming the
  // file and the config key). rank / world_size: data-parallel sharding.
  static Dataset open(const DataSection& data, const ModelSection& model, uint64_t seed, int rank = 0,
                      int world_size = 1);

  // The next training batch; advances the train position by one.
  Batch next_train(int64_t batch_size);
  // Evaluation batch #index (index >= 0): the same tensors on every call.
  Batch val_batch(int64_t index, int64_t batch_size) const;

  // Number of next_train calls so far; stored in checkpoints.
  int64_t train_position() const { return train_position_; }
  void set_train_position(int64_t position);

  // One line: source, path(s), train/val token counts.
  std::string describe() const;
  // Lowest achievable mean loss in nats when it is known (synthetic data), else nullopt.
  std::optional<double> entropy_floor_nats() const;
  // Largest token id in the data + 1: the smallest model.vocab_size that fits.
  int64_t vocab_size_needed() const;
  int64_t seq_len() const;

 private:
  struct Impl;  // the loaded data, immutable and shared by copies of a Dataset
  explicit Dataset(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<const Impl> impl_;
  int64_t train_position_ = 0;
};

}  // namespace fp8t::data
