// What fp8train needs from a model, as one interface: the training step (Session), the FP8
// rewrite, ZeRO-3's units (lib/dist/fully_sharded.h), checkpoints, export, eval and bench hold a
// model::Model and nothing more specific. A model family (today one: Gpt, lib/model/gpt.h, which
// builds the GPT-2 and LLaMA shapes) implements it; build() picks the family from the config.
//
// The contract, beyond the functions below:
// - Token ids in, int64 [B, T]; next-token targets of the same shape.
// - Linear, norm and activation layers live in slots (SlotModule, lib/model/layers.h) of the
//   model or of its submodules, so that the FP8 rewrite can replace them; a norm or activation
//   names the Linear it feeds. A Linear outside a slot stays in high precision.
// - Parameter names are the model's own and stable: checkpoints store them, and export maps them
//   to Hugging Face names by the config's family (lib/model/hf_layout.h).
// - The forward is divided into units, in forward order, each a set of parameters; the model
//   calls its UnitHooks (lib/model/unit_hooks.h) around each, and ZeRO-3 gathers and frees a
//   unit's weights there. The first unit starts every forward; the last one's backward follows
//   its forward at once.
// The functions are virtual calls, a few per micro-batch: no cost in the step worth naming.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor

#include <cstdint>  // int64_t
#include <memory>   // std::shared_ptr
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

#include "lib/config/experiment.h"  // ModelSection, Recompute
#include "lib/model/expert_exchange.h"  // ExpertExchange
#include "lib/model/layers.h"       // SlotModule
#include "lib/model/unit_hooks.h"   // UnitHooks

namespace fp8t {
namespace model {

// One mixture-of-experts layer's routing since the last read (Model::read_routing_stats).
struct RoutingStats {
  double tokens_min = 0.0;   // assignments of the least loaded expert
  double tokens_mean = 0.0;  // ... per expert on average
  double tokens_max = 0.0;   // ... of the most loaded one
  double tokens_cv = 0.0;    // coefficient of variation of the experts' assignments (sd / mean)
  double padded_frac = 0.0;  // fraction of the grouped GEMMs' rows that are padding (zero rows)
  double aux_loss = 0.0;     // mean balancing loss per micro-batch (moe.balance aux_loss; else 0)
  int64_t dropped = 0;       // tokens dropped (dropless routing: always 0)
};

class Model : public SlotModule {
 public:
  // ---- the step ----
  // idx: int64 [B, T] -> logits [B, T, vocab] (eval's and export's logits).
  virtual at::Tensor forward(const at::Tensor& idx) = 0;
  // idx -> the LM head's input [B, T, d]. The training step calls hidden, then head_loss, and
  // drops h between them.
  virtual at::Tensor hidden(const at::Tensor& idx) = 0;
  // The mean next-token cross-entropy (FP32, 0-d) of the head on h.
  virtual at::Tensor head_loss(const at::Tensor& h, const at::Tensor& targets) = 0;
  at::Tensor forward_loss(const at::Tensor& idx, const at::Tensor& targets) { return head_loss(hidden(idx), targets); }
  // Mean next-token cross-entropy of logits in FP32 (ops::cross_entropy: fused kernels on the
  // GPU). On the GPU its backward overwrites the logits with their gradient (to save a
  // logits-sized buffer): read the logits before the backward, never after.
  static at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets);

  // ---- settings the trainer passes on ----
  // train.recompute: what the backward recomputes instead of keeping (lib/model/recompute.h).
  // The FP8 rewrite reads recompute() too (activation and casts are its business).
  virtual void set_recompute(Recompute mode) = 0;
  virtual Recompute recompute() const = 0;
  // train.loss_chunk_mib in bytes: the budget of logits per chunk of a chunked head (a family
  // without one ignores it).
  virtual void set_loss_chunk_bytes(int64_t bytes) = 0;

  // ---- parameters ----
  // Parameters without duplicates (a tied weight under its first name), by name: the order of
  // the optimizer's parameters and of checkpoints.
  std::vector<std::pair<std::string, at::Tensor>> unique_named_parameters() const;
  int64_t parameter_count() const;  // unique parameters
  // Forward + backward FLOPs per token (bench's and the log's MFU; docs/benchmarks.md).
  virtual double flops_per_token() const = 0;

  // ---- state outside the gradients (a family with a router; the defaults: none) ----
  // The step's micro-batches: loss terms a family adds through the backward of its own (a router's
  // balancing loss) get the gradient scale the step gives the cross-entropy, 1 / n.
  virtual void set_micro_batches(int64_t n) { (void)n; }
  // Device tensors the forwards of a step accumulate that data-parallel ranks sum, in place, before
  // end_step (a router's per-expert load under moe.balance bias).
  virtual std::vector<at::Tensor> step_counts() { return {}; }
  // After the optimizer step (skipped: 0-d device flag, non-zero when the step was skipped): state
  // updated from those counts, which are then zeroed. Device work only: a CUDA graph replays it.
  virtual void end_step(const at::Tensor& skipped) { (void)skipped; }
  // Tensors that are the model's state but not parameters (a router's selection bias), by name:
  // checkpoints keep and restore them; the optimizer and export do not see them.
  virtual std::vector<std::pair<std::string, at::Tensor>> model_state() { return {}; }
  // Routing statistics of each mixture-of-experts layer ("h3.mlp") since the last call: a host read,
  // on log steps.
  virtual std::vector<std::pair<std::string, RoutingStats>> read_routing_stats() { return {}; }

  // ---- expert parallelism (a family with experts; the defaults: none) ----
  // Keeps only experts [first, first + count) of every expert layer (before the FP8 rewrite and the
  // optimizer) and returns the names of the parameters that now hold this rank's experts: they
  // differ between the ranks of an expert group, so they are neither broadcast nor averaged with
  // the other parameters' gradients (lib/dist/expert_parallel.h).
  virtual std::vector<std::string> keep_experts(int64_t first, int64_t count) {
    (void)first;
    (void)count;
    return {};
  }
  // The exchange that carries tokens to their experts' ranks and back (after keep_experts).
  virtual void set_expert_exchange(c10::intrusive_ptr<ExpertExchange> exchange) { (void)exchange; }

  // ---- units (ZeRO-3) ----
  virtual int num_units() const = 0;
  // The unit that owns the parameter of this name (a name of unique_named_parameters).
  virtual int unit_of(const std::string& parameter) const = 0;
  // The units whose weights `unit`'s computation reads: itself, and e.g. the embeddings for a
  // head tied to them.
  virtual std::vector<int> units_read_by(int unit) const { return {unit}; }
  // Null hooks (the default): no calls.
  virtual void set_unit_hooks(std::shared_ptr<UnitHooks> hooks) = 0;
};

// The model the config describes, with its starting weights (model.init_from, else random from
// the current torch seed), on the CPU: the MoE family (lib/model/moe_model.h) when moe.experts > 0,
// else the Gpt family (GPT-2 and LLaMA shapes). A new family adds its config key and its branch here.
std::shared_ptr<Model> build(const ModelSection& cfg);

}  // namespace model
}  // namespace fp8t
