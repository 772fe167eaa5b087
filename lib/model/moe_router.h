// A mixture of experts' routing, as functions of plain tensors (lib/model/moe_layer.h holds the
// router's weight and calls them): token-choice top-k routing in FP32, dropless, and the dispatch
// plan that puts every (token, choice) pair in its expert's row group of one padded buffer for the
// grouped GEMMs. Everything stays on the tokens' device: no host read, so a step with experts is
// one CUDA graph like any other.
//
// The buffer: rows = padded_rows(tokens * top_k, experts). Expert e's rows start at a multiple of
// kGroupRowAlign (lib/model/layers.h) and hold its assignments in token order, then zero rows up to
// max(align, ceil_align(count)); the last expert's group runs to the end of the buffer (a tail of
// zero rows), so that every row belongs to a group and the grouped GEMMs compute every row (zeros
// in, zeros out: the padding never carries a non-finite value into a per-tensor amax). An expert
// without tokens still has kGroupRowAlign zero rows: its weight gradient is a sum of zeros, exactly
// 0, never an uninitialised or NaN block.
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <cstdint>  // int64_t

#include "lib/config/experiment.h"  // MoeSection

namespace fp8t {
namespace model {

// The rows of the dispatch buffer for `assignments` (tokens * top_k) over `experts`: room for
// every expert's alignment padding and its minimum group, whatever the counts.
int64_t padded_rows(int64_t assignments, int64_t experts);

struct Routing {
  at::Tensor experts;   // int64 [T, k]: the chosen experts of each token
  at::Tensor weights;   // float32 [T, k]: their weights on the experts' outputs (differentiable)
  at::Tensor scores;    // float32 [T, E]: the router's scores (softmax or sigmoid)
  at::Tensor counts;    // float32 [E]: assignments per expert
  at::Tensor aux_loss;  // 0-d float32 with the router's graph (balance aux_loss, training); else undefined
};

// Routes the tokens x [T, d] (any float dtype) with the router weight [E, d] (FP32): logits and
// scores in FP32 (autocast off), the top k of scores + bias (bias: float32 [E], balance bias, or
// undefined) — or round robin under moe.force_balance — and their weights (scores, renormalised
// under norm_topk or a sigmoid score). aux_loss when `with_aux_loss` and moe.balance is aux_loss:
// coef * E * sum_e f_e P_e, f_e the fraction of assignments to e, P_e the mean (normalised) score.
Routing route(const at::Tensor& x, const at::Tensor& router_weight, const at::Tensor& bias, const MoeSection& moe,
              bool with_aux_loss);

// Where each (token, choice) pair goes in the padded buffer, and the groups' ends.
struct DispatchPlan {
  at::Tensor rows_of;   // int64 [T * k]: the buffer row of pair t * k + j
  at::Tensor offsets;   // int32 [E]: the end row of each expert's group (the last = rows)
  int64_t rows = 0;     // the buffer's rows (padded_rows)
  int64_t top_k = 0;
};

// The plan of `experts` (int64 [T, k]) over `num_experts` experts with per-expert `counts` (as
// route() gives them): a stable sort of the pairs by expert, device-side.
DispatchPlan plan_dispatch(const at::Tensor& experts, const at::Tensor& counts, int64_t num_experts);

// x [T, d] -> the buffer [rows, d]: row rows_of[t*k + j] = x[t], every other row 0. Differentiable:
// the gradient of x sums its k rows' gradients in choice order (deterministic).
at::Tensor dispatch(const at::Tensor& x, const DispatchPlan& plan);

// The buffer's outputs y [rows, d] -> [T, d]: out[t] = sum_j weights[t, j] * y[rows_of[t*k + j]]
// (weighted_sum of the picked rows). Differentiable in y and the weights (the buffer's gradient is
// 0 on padding rows).
at::Tensor combine(const at::Tensor& y, const at::Tensor& weights, const DispatchPlan& plan);

// y.index_select(0, rows) for rows that are distinct (each buffer row picked at most once): the
// backward writes the gradient rows back with one index_copy (no atomic additions, as
// index_select's own backward makes).
at::Tensor gather_rows(const at::Tensor& y, const at::Tensor& rows);

// Its inverse: a zero buffer of `total` rows whose rows `rows` (distinct) are src's rows. The
// backward gathers the gradient rows; only the index is kept for it (not src).
at::Tensor scatter_rows(const at::Tensor& src, const at::Tensor& rows, int64_t total);

// out[t] = sum_j weights[t, j] * picked[t, j] for picked [T, k, d]: one batched GEMM in picked's
// dtype (FP32 accumulation; under autocast the weights are rounded to bf16, as the experts'
// outputs are). Differentiable in both.
at::Tensor weighted_sum(const at::Tensor& picked, const at::Tensor& weights);

// Expert parallelism's plan on the host (after the counts were exchanged, lib/model/moe_layer.cpp):
// `from` int64 [ranks, local experts] on the CPU, the rows each rank sends to each of this rank's
// experts, received rank by rank and in expert order within each; returns each received row's
// place in the padded expert-major buffer (groups as plan_dispatch's: aligned, at least one
// block) and the groups' ends.
struct ReceivedPlan {
  at::Tensor rows_of;  // int64 [received rows], on the CPU
  at::Tensor offsets;  // int32 [local experts], on the CPU
  int64_t rows = 0;
};
ReceivedPlan plan_received(const at::Tensor& from);

}  // namespace model
}  // namespace fp8t
