// Dataset: deterministic [B, T] next-token batches for training and evaluation.
//
// Three sources (data.source): `synthetic` (a random Markov chain drawn from the seed; no
// files), `text` (files' bytes) and `tokens` (llm.c shards or nanoGPT .bin files). The files
// of data.train_path and data.val_path (paths, globs or lists) form one ShardSet each
// (shard_set.h): windows never straddle two files.
//
// Determinism: every window is a pure function of a key, never of generator state.
//   training row r of next_train call p on rank k with B rows per rank: global row
//     g = k * B + r, so W ranks of B rows draw exactly the rows one process of W * B rows draws.
//     data.order random: the key (seed, train, p, g) picks a window start uniformly among all
//       starts of the training files, with replacement (for synthetic data it seeds the
//       chain's walk).
//     data.order sequential: the row is number s = D + g of the training stream, D the windows
//       drawn before this call over all ranks (windows_drawn). Epoch e = s / N walks the N
//       non-overlapping windows of the training files in the order of a keyed permutation
//       (seed, train order, e) (counter_rng.h): every window once per epoch, a new order each
//       epoch, and the ranks' rows disjoint.
//   validation batch i, row r on rank k of world W: global row g = k * B + r of batch i, so W
//     ranks of B rows evaluate exactly the rows one rank of W * B rows would. For files these
//     are consecutive non-overlapping windows of the validation files (independent of the
//     seed, so runs with different seeds are evaluated on the same text); for synthetic data
//     they come from a stream disjoint from training.
// The train position is the number of next_train calls and the windows they drew: restoring
// both resumes exactly (windows_drawn also after a change of ranks or batch size).
//
// Tests: with FP8TRAIN_TEST_WINDOWS=PREFIX in the environment, every training row of rank k is
// appended to the file PREFIX.rank<k> as "s file offset" (stream number s = D + g, file index,
// token offset in the file), so a test can see which windows a run trained on.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <cstdint>   // int64_t, uint64_t
#include <memory>    // std::shared_ptr
#include <optional>  // std::optional
#include <string>    // std::string
#include <string_view>  // std::string_view
#include <vector>     // std::vector

#include "lib/config/experiment.h"  // DataSection, ModelSection
#include "lib/config/parallel_layout.h"  // ParallelLayout

namespace fp8t::data {

// One batch of windows: targets[b, t] is the token after inputs[b, t].
struct Batch {
  at::Tensor inputs;   // int64 [B, T], CPU, contiguous
  at::Tensor targets;  // int64 [B, T], CPU, contiguous
};

class Dataset {
 public:
  // Loads and validates the data (bad files and settings throw ExitCode::kBadInput naming the
  // file and the config key). `layout`: this process's place in the data-parallel group (its
  // data_parallel_rank() of data_parallel_size() picks the rows; the default is one process).
  static Dataset open(const DataSection& data, const ModelSection& model, uint64_t seed,
                      const ParallelLayout& layout = {});
  // Validation only (`fp8train eval --data`): the files of `paths` (paths, globs, lists) in
  // `source` (text or tokens), checked as open() checks data.val_path, with errors that name
  // `config_key`; val_batch draws from them exactly as from data.val_path. It has no training
  // data: next_train is an internal error.
  static Dataset open_validation(DataSource source, const std::vector<std::string>& paths,
                                 std::string_view config_key, const ModelSection& model);

  // The next training batch; advances the train position by one call and world_size *
  // batch_size windows. A data file that changed since open (truncated, or holding a token
  // beyond model.vocab_size) throws fp8t::Error (kTrainingFailed) naming the file.
  Batch next_train(int64_t batch_size);
  // Evaluation batch #index (index >= 0): the same tensors on every call.
  Batch val_batch(int64_t index, int64_t batch_size) const;

  // Number of next_train calls so far; stored in checkpoints.
  int64_t train_position() const { return train_position_; }
  void set_train_position(int64_t position);
  // Windows drawn by next_train so far over all ranks; stored in checkpoints (the position of
  // data.order sequential).
  int64_t windows_drawn() const { return windows_drawn_; }
  void set_windows_drawn(int64_t windows);

  // Passes over the training data so far, windows_drawn / windows per epoch (1.5: half-way
  // through the second); nullopt for synthetic data, which has no epochs.
  std::optional<double> epoch() const;
  // Training tokens (targets) drawn so far over all ranks: windows_drawn * seq_len.
  int64_t tokens_seen() const;
  // Tokens in the training files (0 for synthetic data).
  int64_t train_tokens() const;
  // The tokens of one epoch: the non-overlapping windows of the training files times seq_len
  // (0 for synthetic data).
  int64_t tokens_per_epoch() const;
  // Number of training files (0 for synthetic data).
  int64_t train_files() const;

  // One line: source, path(s), train/val token counts, order.
  std::string describe() const;
  // What the run should warn about its data files before training (shard_manifest.h: shards a
  // pattern leaves out, a folder without manifest.json, ...), one line each.
  const std::vector<std::string>& warnings() const;
  // Lowest achievable mean loss in nats when it is known (synthetic data), else nullopt.
  std::optional<double> entropy_floor_nats() const;
  // Largest token id in the data + 1: the smallest model.vocab_size that fits.
  int64_t vocab_size_needed() const;
  // The non-overlapping validation windows of the files (val_batch wraps around after them);
  // 0 for synthetic data, whose validation stream never ends.
  int64_t val_windows() const;
  int64_t seq_len() const;

 private:
  struct Impl;  // the loaded data, immutable and shared by copies of a Dataset
  explicit Dataset(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<const Impl> impl_;
  int64_t train_position_ = 0;
  int64_t windows_drawn_ = 0;
};

}  // namespace fp8t::data
