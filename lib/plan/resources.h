// Whether a config can fit at all, decided before anything is allocated or written, and what
// to say when a GPU runs out of memory anyway.
//
// A lower bound of the memory a training run needs per rank, from the config alone, in bytes
// per parameter (W = data-parallel ranks):
//   weights      4  (float32; they are AdamW's master weights; every rank keeps all of them)
//   gradients    4  (float32, accumulated over the micro-batches; all of them on every rank);
//                dist.zero 1 (ZeRO-1): 4 / W (the rank's reduced shard) plus the full buckets
//                alive at once, counted as bytes, not per parameter: about 3 x dist.bucket_mb
//                during the backward (filling, reducing, being released); with
//                train.grad_accum_steps > 1 all of them persist over the micro-batches, 4 per
//                parameter in all (4 - 4 / W of it counted as bucket bytes)
//   optimizer    8  (AdamW's two float32 moments; 4 with train.moments_dtype bf16; divided by W
//                with dist.zero 1, ZeRO-1)
//   copies       precision fp8: 2 per weight of an FP8 Linear (E4M3 copy and its transpose; 1
//                with train.recompute casts, which makes the transpose in the backward, where
//                the recipe transposes codes: not rowwise, Scaling::transposes_weight_codes);
//                bf16/fp16: 2 per Linear weight (autocast's copy, kept for the backward)
// dist.zero 3 (ZeRO-3) shards over W = dist.shard_group_size ranks (0: all of them): weights
// 4 / W, gradients 4 / W (the FP32 shard, accumulated over the micro-batches), optimizer 8 / W
// (4 / W), no persistent copies (but for a recipe whose FP8 weights are not gathered as codes,
// Scaling::WeightParts::fp8_gather false, rowwise: each FP8 Linear keeps its own weight cache, the
// copies above, unsharded); and counted as bytes, for units (the embeddings, each block, the head,
// in forward order):
//   gathered weights   the unit computing and dist.prefetch more, the widest such run of units:
//                      1 byte per FP8 Linear weight under precision fp8 plus its transpose made
//                      after the gather (2 in all; rowwise: gathered as the rest), the compute
//                      dtype for the rest (2 bytes; 4 under fp32); dist.reshard_after_forward
//                      false: every unit (from its forward to its backward)
//   gradient buffers   the full-size FP32 gradients of two units (the one being reduced, the one
//                      being produced; dist.reduce_dtype bf16 adds a 2-byte copy of each)
// plus, under bf16 and fp8 with dist.zero 0 or 1, the chunked head's FP32 weight gradient
// (vocab_size x d_model, made in the forward and kept to the backward:
// lib/ops/linear_cross_entropy.h; under ZeRO-3 it is one of the two units' gradient buffers),
// plus the activations of one micro-batch: per token, the inputs every layer keeps for its
// backward (3 * d_model + 2 * ff_dim per block; train.recompute keeps less, see below) and the
// logits (vocab_size; bf16 and fp8 hold one chunk of logit rows at a time, the rule of
// lib/ops/linear_cross_entropy.h), at 4 bytes (fp32) or 2 bytes (bf16/fp16/fp8 autocast) per element.
// plus the attention scores where the attention materialises them (attention_scores_on): ATen's
// math path of scaled_dot_product_attention computes the [B, H, T, T] scores of each layer
// and keeps three such tensors for the backward (the softmax output, the dropout noise and the
// dropped probabilities), plus one transient copy, at the activation element size (B
// train.micro_batch_size, H model.n_head, T model.seq_len). LibTorch runs the math path on the
// CPU when model.dropout > 0 (its CPU flash kernel takes no dropout); the fused kernels (the
// CPU's flash kernel, the GPU's flash, memory-efficient and cuDNN kernels) never hold the scores,
// so GPU estimates have no such term.
// A mixture of experts' terms (parameters, experts per rank, activations, transient buffers):
// lib/plan/moe_terms.h.
// Workspaces, allocator slack and the data are left out, so a config that fails this check can
// never run, while one that passes may still need more than estimated.
#pragma once

#include <ATen/core/Tensor.h>  // (at::Device through c10)
#include <c10/core/Device.h>   // c10::Device

#include <cstdint>  // int64_t
#include <string>   // std::string

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/config/parallel_layout.h"  // ParallelLayout

namespace fp8t::plan {

struct MemoryEstimate {
  double parameters = 0;        // count (lower bound: embeddings, attention and MLP matrices)
  ParallelLayout layout;        // the ranks and the sharding the per-rank figures are for
  int world_size = 1;           // data-parallel ranks the per-rank figures are for
  int shard_ranks = 1;          // ranks the sharded state is divided by (1 under DDP)
  // Bytes per parameter, per rank (the header's table).
  double weight_bytes_per_param = 4;
  double grad_bytes_per_param = 4;
  double optimizer_bytes_per_param = 8;
  double fp8_bytes_per_param = 0;  // weight copies (FP8, or autocast's), averaged over all parameters
  // The full gradient buffers alive at once: ZeRO-1's buckets, ZeRO-3's two units (above).
  double gradient_bucket_bytes = 0;
  double state_bytes = 0;       // parameters x the four above + gradient_bucket_bytes
  double gathered_weight_bytes = 0;  // ZeRO-3: the units' weights gathered at once
  int64_t gathered_units = 0;        // ZeRO-3: how many units those are
  double head_gradient_bytes = 0;    // the chunked head's FP32 weight gradient, forward to backward
  double activation_bytes = 0;  // one micro-batch
  double attention_score_bytes = 0;  // the [B, H, T, T] scores of the math path (0: fused attention)
  // A mixture of experts (lib/plan/moe_terms.h): the model's parameters and those a token passes
  // through (parameters above: what this rank holds, its share of the experts under
  // dist.expert_parallel), and one MoE block's transient buffers (dispatch or weight gradient).
  double total_parameters = 0;
  double active_parameters = 0;
  double moe_transient_bytes = 0;
  double total_bytes() const {
    return state_bytes + gathered_weight_bytes + head_gradient_bytes + activation_bytes + attention_score_bytes +
           moe_transient_bytes;
  }
  double state_bytes_per_param() const {
    return weight_bytes_per_param + grad_bytes_per_param + optimizer_bytes_per_param + fp8_bytes_per_param;
  }
  // "weights 4 + gradients 4 + AdamW moments 8 + FP8 copies 1.9 = 17.9 bytes/parameter (x 1.24e9
  // parameters = 20.6 GiB); activations of one micro-batch 1.2 GiB (train.micro_batch_size=...)".
  std::string breakdown(const ExperimentConfig& cfg) const;
};

// Where scaled_dot_product_attention keeps the attention scores in training.
enum class AttentionScores {
  kFused,         // a fused kernel: never materialised
  kMaterialised,  // ATen's math path: [B, H, T, T] per layer (the header's term)
};

// The path on the device named `device_name`: "cpu" asks ATen which kernel it would choose for
// the model's attention in training (at::_fused_sdp_choice on tiny tensors of the model's heads,
// head size and activation dtype, with model.dropout); any other name is a GPU (c10::Device::str
// "cuda:0", or a planned cluster's devices): kFused.
AttentionScores attention_scores_on(const ExperimentConfig& cfg, const std::string& device_name);

// Bytes per micro-batch of the math path's scores (the header's term): (3 x model.n_layer + 1)
// x micro_batch_size x n_head x seq_len^2 x the activation element size.
double attention_score_bytes(const ExperimentConfig& cfg);

// Computed in double precision, so that absurd sizes (1e12 sequences) do not overflow.
// `layout`: the ranks planned for and what they shard (its shard_ranks() divides the gradients
// and the optimizer state when it shards the optimizer state, and the weights too when it
// shards the weights); its stage is the one used, whatever cfg.dist.zero says.
// `scores`: whether the attention scores are counted (attention_scores_on).
MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg, const ParallelLayout& layout,
                                        AttentionScores scores = AttentionScores::kFused);
// One process with cfg.dist's sharding (ParallelLayout::of(cfg.dist)).
MemoryEstimate estimate_training_memory(const ExperimentConfig& cfg);

// "none", "activation", "casts", "attention", "mlp", "block" (the train.recompute values).
const char* recompute_name(Recompute r);

// Throws fp8t::Error (kBadInput) when the estimate exceeds `capacity_bytes` (the memory of
// `device_name`), naming the keys that set the larger part, both numbers and the levers.
// `layout`: this job's (one process when left out).
void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name,
                       const ParallelLayout& layout);
void check_memory_fits(const ExperimentConfig& cfg, double capacity_bytes, const std::string& device_name);

// An out-of-memory error a person can act on (kBadInput: the config does not fit): what was
// happening (`when`, e.g. "building the model"), the allocator's message, the estimate's
// breakdown and the levers dist.zero, train.recompute and train.micro_batch_size.
[[noreturn]] void throw_out_of_memory(const ExperimentConfig& cfg, const ParallelLayout& layout,
                                      const std::string& when, const std::string& allocator_message);

// Test hook for the out-of-memory path on machines without a GPU: when the environment
// variable FP8TRAIN_TEST_OOM equals `point` ("build": the model's construction, "step": the
// first training step), throws the same c10::OutOfMemoryError a CUDA allocation failure does.
void maybe_inject_out_of_memory(const char* point);

// The memory of the device: physical RAM for the CPU, total GPU memory for CUDA.
double device_memory_capacity(const c10::Device& device);

}  // namespace fp8t::plan
