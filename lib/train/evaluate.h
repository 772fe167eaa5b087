// `fp8train eval`: the validation loss (and perplexity) of saved weights — a run folder's
// checkpoint or a safetensors file — on the run's own validation data or on any token files, in
// any precision and FP8 recipe, on the CPU or a GPU. It only reads: the run folder is never
// written (the caller writes --json where it is asked to).
//
// The trainer's evaluation, repeated: Session::eval_loss_sum over Dataset::val_batch(i, B) for
// i < N, divided by N, with the checkpoint's FP8 scaling state. With the run's config, data,
// device and precision, B = train.micro_batch_size and N = train.eval_batches, the loss of the
// final checkpoint is the final val_loss of metrics.jsonl bit for bit (single-process runs; a
// run of W ranks averaged W partial sums, so B = W x micro_batch_size matches it up to the
// order of a float32 sum).
//
// --batches all evaluates every non-overlapping window of the validation files once (the last
// batch may be smaller); the loss is then the mean over all their target tokens.
#pragma once

#include <cstdint>   // int64_t
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include <nlohmann/json.hpp>  // nlohmann::json

#include "lib/config/loader.h"  // config::Override

namespace fp8t::train {

struct EvalRequest {
  std::string run_dir;  // a run folder (<out_dir>/<run_name>): its config.yaml and a checkpoint; or
  std::string weights;  // a safetensors file (fp8train's or Hugging Face's names)
  // The experiment YAML that gives `weights` its model shape (and, without `data`, its
  // validation data). Default: config.yaml beside the file, else the config.json that
  // `export --names hf` writes beside it. Not used with run_dir.
  std::string config;
  std::optional<int64_t> step;     // run_dir: a step whose checkpoint the folder keeps (default: the newest)
  std::vector<std::string> data;   // validation files (paths, globs); empty: the config's validation data
  std::string source;              // "text" or "tokens" for `data`; "": the config's file source, else tokens
  std::optional<int64_t> batches;  // batches to evaluate (default: train.eval_batches)
  bool all = false;                // every window of the validation files once instead
  int64_t batch_size = 0;          // windows per batch; 0: train.micro_batch_size x the run's ranks
  std::vector<config::Override> overrides;  // --precision, --fp8-recipe, --device, --set (on the config)
};

struct EvalResult {
  double loss = 0.0;        // mean cross-entropy, nats per target token
  double perplexity = 0.0;  // exp(loss)
  int64_t sequences = 0;    // windows evaluated (a window counts again when the batches wrap around)
  int64_t tokens = 0;       // target tokens evaluated: sequences x seq_len
  int64_t batches = 0;
  int64_t batch_size = 0;
  std::string precision;    // fp32, bf16, fp16, fp8
  std::string fp8_recipe;   // delayed, current, block, rowwise; empty unless fp8
  std::string device;
  std::string weights;          // the file the weights came from
  std::optional<int64_t> step;  // the training step of the weights, when known
  std::string data;             // the validation data, described
  double seconds = 0.0;

  nlohmann::json to_json() const;
  // "eval: loss 2.7183 | perplexity 15.154 | 8192 tokens (128 sequences) | fp8 (delayed) on cpu | step 60 of ..."
  std::string summary_line() const;
};

// Loads the weights and the data, evaluates, returns the result. Writes nothing. Throws
// fp8t::Error (kBadInput) naming the folder, file, key or shape for bad input: no run folder or
// checkpoint, a --step the folder does not keep, missing data files, token ids beyond the
// model's vocabulary (or a manifest.json whose tokenizer does not fit the model's), weights of
// another shape. A run folder that a training run holds is read all the same (its newest
// complete checkpoint; a note says so, and whether a newer one is being written).
EvalResult evaluate_weights(const EvalRequest& request);

}  // namespace fp8t::train
