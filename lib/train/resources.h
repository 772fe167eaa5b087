// Whether a config can fit at all, decided before anything is allocated or written.
//
// A lower bound of the memory a training run needs, from the config alone:
//   weights, gradients and AdamW moments: 16 bytes per parameter (float32 each);
//   activations of one micro-batch: per token, the inputs every layer keeps for its backward
//   (3 * d_model + 2 * ff_dim per block) and the logits (vocab_size), at 4 bytes (fp32) or
//   2 bytes (bf16/fp8 autocast) per element.
// Attention scores, workspaces, allocator slack and the data are left out, so a config that
// fails this check can never run, while one that passes may still need more than estimated.
#pragma once

#include <ATen/core/Tensor.h>  // (at::Device through c10)
#include <c10/core/Device.h>   // c10::Device

#include <string>  // std::string

#include "lib/config/experiment.h"  // ExperimentConfig

namespace fp8t::train {

struct MemoryEstimate {
  double parameters = 0;        // count (lower bound: embeddings, attention and MLP matrices)
  double state_bytes = 0;       // weights + gradients + optimizer moments
  double activation_bytes = 0;  // one micro-batch
  double total_bytes() const { return state_bytes + activation_bytes; }
};

// Computed in double precision, so that absurd sizes (1e12 sequences) do not overflow.
MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg);

// Throws fp8t::Error (kBadInput) when the estimate exceeds `capacity_bytes` (the memory of
// `device_name`), naming the keys that set the larger part and both numbers.
void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name);

// The memory of the device: physical RAM for the CPU, total GPU memory for CUDA.
double device_memory_capacity(const c10::Device& device);

}  // namespace fp8t::train
