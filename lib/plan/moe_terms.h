// The mixture-of-experts family's terms of the memory estimate (resources.h), from the config
// alone (moe.experts > 0; lib/model/moe_model.h):
//   parameters   per MoE block: attention, the router (experts x d_model, FP32, never FP8), the
//                experts (experts x 3 x d_model x moe.d_ff: SwiGLU gate, up and down) and the
//                shared experts (3 x d_model x shared_experts x moe.d_ff); the first
//                moe.first_k_dense blocks are dense. Active per token: the experts' part scaled by
//                top_k / experts. dist.expert_parallel N: each rank holds experts / N of every
//                MoE block's experts (their weights, gradients and moments).
//   activations  per token of a MoE block's feed-forward part, kept for the backward: the
//                router's FP32 input (2 elements per d_model), and per routed row (top_k per
//                token plus the alignment padding) the experts' inputs (precision fp8: their
//                E4M3 copies, half an element; else d_model), the SwiGLU input (2 x moe.d_ff), the
//                down projection's input (fp8: half an element per moe.d_ff; else moe.d_ff) and
//                the expert outputs the weighted sum reads (d_model); the shared experts as a dense
//                SwiGLU MLP (2 x their width). train.recompute mlp or block: none of it.
//   transient    one MoE block at a time, the larger of two:
//                - the forward's padded dispatch buffers: rows x (2 x d_model + 3 x moe.d_ff)
//                  elements, rows = tokens x top_k rounded up to 16 + 16 x experts;
//                - the backward's weight gradient of experts_fc (this rank's experts x 2 x
//                  moe.d_ff x d_model): as its GEMM writes it (bf16) and widened to the FP32
//                  gradient, 6 bytes per weight (fp32 runs: 4), beside the gradient rows it is
//                  made from and the dgrad's output, rows x (d_model + 2 x moe.d_ff) elements.
#pragma once

#include "lib/config/experiment.h"  // ExperimentConfig, ModelSection

namespace fp8t::plan {

struct MoeSizes {
  double dense_layers = 0;     // blocks with a dense MLP (moe.first_k_dense)
  double moe_layers = 0;       // blocks with a mixture of experts
  double moe_block = 0;        // one MoE block's parameters (attention, router, experts, shared)
  double router = 0;           // one MoE block's router matrix (stays FP32)
  double experts = 0;          // the experts' weights of every MoE block (all ranks together)
  double active_experts = 0;   // of those, what one token passes through (top_k / experts)
};

// attention: one block's attention matrices. Zeroes when moe.experts is 0.
MoeSizes moe_sizes(const ModelSection& m, double attention);

// The experts' weights held by one rank: all of them, or 1 / dist.expert_parallel of them when the
// layout has a multiple of dist.expert_parallel ranks.
double experts_per_rank(const ExperimentConfig& cfg, const MoeSizes& s, int world_size);

// Elements kept per token by one MoE block's feed-forward part (the header's activations).
double moe_kept_per_token(const ExperimentConfig& cfg);

// Bytes of one MoE block's dispatch buffers for one micro-batch (the header's first transient).
double dispatch_buffer_bytes(const ExperimentConfig& cfg);

// Bytes of one MoE block's experts_fc weight gradient in the backward (the header's second
// transient), for `experts_held` expert weights on this rank (experts_per_rank).
double expert_wgrad_bytes(const ExperimentConfig& cfg, const MoeSizes& s, double experts_held);

// The larger of the two: what one MoE block adds for a moment, forward or backward.
double moe_transient_bytes(const ExperimentConfig& cfg, const MoeSizes& s, double experts_held);

}  // namespace fp8t::plan
