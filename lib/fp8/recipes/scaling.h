// The scaling interface: one state class per FP8 recipe, behind one abstract class.
//
//   DelayedScaling (delayed_scaling.h)  per-tensor scales from an amax history (TE DelayedScaling)
//   CurrentScaling (current_scaling.h)  per-tensor scales from the amax of the tensor being cast,
//                                       in the same step (TE Float8CurrentScaling)
//   BlockScaling   (block_scaling.h)    FP32 scales per 1x128 (activations, gradients) or 128x128
//                                       (weights) block, E4M3 everywhere (TE Float8BlockScaling)
//   RowwiseScaling (rowwise_scaling.h)  one FP32 scale per row of every GEMM operand, E4M3
//                                       everywhere (torchao's rowwise recipe)
//
// A state class owns its slots (one per FP8 tensor of the model: "<layer>:input", ":weight",
// ":grad_output") and PRODUCES the quantized operands of a slot (codes, scales in the layout the
// GEMM reads, the columnwise copy when asked) from a CastSource: a tensor, or an operation a fused
// producer (norm, GELU, ...) wants cast without writing it in high precision. It composes the
// backend's primitives (backend.h: cast, record_amax, current_scale, block_quantize,
// saturation_stats), so the CPU emulation and the GPU differ only in the backend.
//
// Fp8Linear, Fp8Norm, the fused activations, the rewrite pass and the trainer hold a Scaling and
// never name a concrete recipe; make_scaling(recipe) (registry.cpp) is the one place that does.
// What differs between recipes outside lib/fp8 (names, plan and chart lines, the scales ranks
// share, ZeRO-3's gather) is asked of the recipe: traits() and the queries below.
//
// Who calls what:
//   rewrite       make_scaling, add_slot (through Fp8Linear), unsupported_linear, finalize
//   layers        quantize (every cast), fused_cast_slot (a norm that casts in its own kernel),
//                 fast_accumulation, weight_epoch (the weight cache), add_stats
//   trainer       end_micro_batch (after each micro-batch's backward), set_collect_stats,
//                 read_stats (log steps), state_dict / load_state_dict, set_amax_reducer
#pragma once

#include <ATen/ATen.h>  // at::Tensor

#include <functional>  // std::function
#include <map>         // std::map
#include <memory>      // std::shared_ptr
#include <optional>    // std::optional
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include "lib/fp8/backends/backend.h"  // CastSource, Fp8Tensor, GemmKind, SlotRef
#include "lib/config/fp8_recipe.h"     // Recipe, RecipeKind
#include "lib/config/fp8_recipe_fields.h"  // RecipeTraits, recipe_traits

namespace fp8t {
namespace fp8 {

// What a slot's tensor is in its Linear: picks the format (HYBRID: E5M2 gradients) and, under
// block scaling, the block shape (weights 128x128, the others 1x128).
enum class TensorRole { kInput, kWeight, kGradOutput };

// One cast of a slot.
struct CastOptions {
  bool rowwise = true;         // the [rows, K] copy (fprop's operands, dgrad's dy)
  bool columnwise = false;     // the copy of the transpose (dgrad's W^T, wgrad's x^T and dy^T)
  bool record = true;          // false in evaluation: the cast changes no recipe state and no stats
                               // (also forced false under NoRecordScope)
  at::Tensor* dbias = nullptr;  // gradients: also dbias = column sums of the value, FP32 (fused on the GPU)
  at::Tensor known_amax;       // optional 0-d float32: max|value|, when the producer computed it in
                               // its own kernel (a norm); current scaling then skips its amax pass
  at::Tensor scale;            // optional 0-d float32 (per-tensor recipes): cast with this scale, an
                               // earlier cast's (recast_scale), and record nothing: a recast of the
                               // same values gives that cast's codes; current scaling skips its amax pass
  // A SwiGLU gradient cast (kDswiglu) of a per-tensor recipe only, optional: also the columnwise
  // codes of the forward value silu(gate) * up, cast with value_scale (an earlier cast's
  // recast_scale) in value_format and recording nothing, into *value_columnwise, from the same read
  // of h (Backend's ValueCompanion). Current scaling then takes the gradient's amax in a pass that
  // writes no value.
  Fp8Operand* value_columnwise = nullptr;
  at::Tensor value_scale;
  Format value_format = Format::kE4M3;
};

// Per-slot FP8 health statistics of the last log interval (read_stats).
struct SlotStats {
  std::string name;
  std::string format;
  float amax;                  // delayed: of the last completed step; current/block: of the last cast
  float scale;                 // per-tensor recipes: the scale in use; block: the largest block scale
  float saturated;             // fraction of elements at or beyond fp8_max after scaling
  float underflow;             // fraction of non-zero elements that became zero
  std::optional<float> min_block_scale;  // block scaling only: smallest and largest block scale
  std::optional<float> max_block_scale;  // of the last cast
};

// While an instance lives on this thread, no cast records anything (amax, history, statistics)
// and casts use the scales in effect: delayed casts with the current scales and leaves the
// history alone; current recomputes the same amax from the same tensor into scratch state.
// Activation recompute runs the re-executed forward under it, so a step never records twice.
// Thread-local: create it on the thread that runs the forward (a recompute inside a backward
// node creates it there). Nests.
class NoRecordScope {
 public:
  NoRecordScope();
  ~NoRecordScope();
  NoRecordScope(const NoRecordScope&) = delete;
  NoRecordScope& operator=(const NoRecordScope&) = delete;
  static bool active();
};

class Scaling {
 public:
  explicit Scaling(const Recipe& recipe);
  virtual ~Scaling() = default;
  Scaling(const Scaling&) = delete;
  Scaling& operator=(const Scaling&) = delete;

  virtual RecipeKind kind() const = 0;
  const Recipe& recipe() const { return recipe_; }
  // The recipe's config-level description (lib/config/fp8_recipe_fields.h): its name, its plan
  // and chart wording, which scales the ranks share. The trainer asks it instead of the kind.
  const RecipeTraits& traits() const { return recipe_traits(kind()); }

  // ---- slots: registration (before finalize) ------------------------------------------------
  // name: "h0.attn.c_attn:input". Returns the slot index. The recipe picks the format.
  int add_slot(const std::string& name, TensorRole role) { return add_slot(name, format_for(role), role); }
  int add_slot(const std::string& name, Format format, TensorRole role = TensorRole::kInput);
  // HYBRID: E4M3 forward, E5M2 gradients; E4M3: E4M3 everywhere (block overrides: E4M3 always).
  virtual Format format_for(TensorRole role) const;
  // Allocates the recipe's state on `device` (scale 1, zero amaxes).
  void finalize(const at::Device& device);
  bool finalized() const { return device_.has_value(); }
  const at::Device& device() const;
  int num_slots() const { return static_cast<int>(names_.size()); }
  const std::string& slot_name(int i) const { return names_[i]; }
  Format slot_format(int i) const { return formats_[i]; }
  TensorRole slot_role(int i) const { return roles_[i]; }

  // ---- operands -----------------------------------------------------------------------------
  // The FP8 copy of src (2-D) for slot `slot`: every cast of the model goes through here. Records
  // what the recipe records (delayed: the amax into the history; current: the amax and scale of
  // this cast) and, while statistics are collected, the slot's saturation/underflow.
  virtual Fp8Tensor quantize(int slot, const CastSource& src, const CastOptions& opt) = 0;
  // quantize() with ONE scale for the whole tensor (Fp8Operand::scale_layout kTensor), for a
  // consumer that takes no other (cuDNN's FP8 attention, lib/fp8/layers/fp8_attention.h): the
  // recipe's own cast where its scales are per tensor (delayed, current); block and rowwise:
  // current scaling of the tensor (its amax, then fp8_max / amax), recording nothing but stats.
  virtual Fp8Tensor quantize_per_tensor(int slot, const CastSource& src, const CastOptions& opt) {
    return quantize(slot, src, opt);
  }
  // A producer that can write FP8 in its own kernel (the norm) asks for a per-tensor scale that is
  // known before its kernel runs: delayed gives the slot (the producer then records its stats with
  // add_stats); recipes whose scale depends on the value itself give nullopt, and the producer
  // calls quantize() on its high-precision output instead (passing the amax it computed).
  virtual std::optional<SlotRef> fused_cast_slot(int slot, bool record) const;
  // A producer that can compute its output's amax in one pass without writing the output, and
  // cast it in a second pass of its own (the norm, whose input is kept anyway): whether the recipe
  // takes a scale from that amax alone (current), and the slot for that second pass, its scale
  // computed now from known_amax (0-d float32 on the slot's device) and recorded as quantize()
  // records a cast with that amax. The defaults: no (delayed knows its scale beforehand, block
  // needs the values).
  virtual bool scales_from_known_amax() const { return false; }
  virtual SlotRef slot_for_known_amax(int slot, const at::Tensor& known_amax, bool record);
  // The per-tensor scale of the slot's cast that just ran, for a later recast of the same values
  // (CastOptions::scale; the backward recasting a copy it did not keep): valid until that
  // backward. Call it right after the cast, on its thread. Delayed: the slot's scale (it changes
  // only in end_micro_batch, after the backward); current: a copy of the scale that cast computed;
  // undefined where a cast's scales come from the values alone (block: a recast of the same values
  // finds the same blocks).
  virtual at::Tensor recast_scale(int slot) const;

  // ---- GEMMs and layers ---------------------------------------------------------------------
  // Fast (non-promoting) accumulation of a GEMM on the GPU: fp8.fast_accumulation; block: never.
  virtual bool fast_accumulation(GemmKind kind) const;
  // Why a Linear of these dims cannot run under this recipe ("" when it can): the rewrite keeps
  // it in high precision and reports the reason (block: the block-scaled GEMM's constraints).
  virtual std::string unsupported_linear(int64_t in_features, int64_t out_features) const;
  // Why a grouped layer (a mixture of experts' experts) cannot run under this recipe ("" when it
  // can): its scales must fit the grouped FP8 GEMM (RecipeTraits::grouped_gemm).
  std::string unsupported_grouped_linear() const;
  // Whether a weight's columnwise copy is the transpose of its rowwise codes (transposed() in
  // backend.h: one scale per tensor, 128x128 blocks): train.recompute casts then caches the rowwise
  // copy alone and dgrad transposes it. False where the columnwise copy has scales of its own
  // (rowwise: one per column of the weight), which the weight cache then keeps.
  virtual bool transposes_weight_codes() const { return true; }

  // ---- sharded weights (ZeRO-3, lib/dist/README.md) ------------------------------------------
  // A weight whose rows are spread over the ranks is cast part by part where the parts live and
  // gathered as codes and scales; the result must be the cast of the whole weight, bit for bit.
  struct WeightParts {
    // 0: a part may be any element range of the flattened weight (one per-tensor scale); else
    // parts are whole bands of this many rows (block: 128, whose 128x128 blocks find their own
    // scales in the rows they hold).
    int64_t row_multiple = 0;
    // The scale needs max|W| over the whole weight before any part is cast (the recipes that
    // scale from an amax alone: scales_from_known_amax): the holder reduces the parts' amaxes
    // and calls sharded_weight_scale.
    bool whole_amax = false;
    // The layout of a part's scale_inv and of the gathered weight's (block: the 128x128 grid).
    ScaleLayout scale_layout = ScaleLayout::kTensor;
    // Whether sharded weights travel as FP8 codes at all. false: they are gathered in the compute
    // dtype like the other weights and cast where they are used (rowwise: dgrad's Wᵀ needs scales
    // per column of the whole weight, which no rank's band of rows has).
    bool fp8_gather = true;
  };
  virtual WeightParts weight_parts() const { return {0, scales_from_known_amax(), ScaleLayout::kTensor}; }
  // The floats of scale_inv that the cast of a part of `rows` x `cols` of a weight carries: one
  // per-tensor scale; block: its 128x128 grid rows (padding included).
  virtual int64_t part_scale_floats(int64_t rows, int64_t cols) const;
  // The `count` (part_scale_floats) floats of a part's cast scale_inv as one flat tensor: the 0-d
  // scale as [1]; block: the grid's buffer from storage offset 0 (make_block_scales's layout).
  virtual at::Tensor flat_part_scales(const Fp8Operand& part, int64_t count) const;
  // The gathered weight's scale_inv (rows x cols) from its owners' flat scales, in row order:
  // per-tensor, every owner cast with the same scale (the first one's float, a view of it);
  // block: the grid assembled from every owner's rows (a new tensor).
  virtual at::Tensor gathered_scale_inv(int64_t rows, int64_t cols, const std::vector<at::Tensor>& owners) const;
  // For WeightParts::whole_amax recipes: the scale the parts of weight slot `slot` are cast with
  // (CastOptions::scale, record false) when max|W| over all parts is `whole_amax` (0-d float32),
  // recorded as a cast of the whole weight records it when `record`. Every rank calls it, also
  // for weights it holds no part of, so that every rank's slot state is what a whole cast leaves.
  // slot_for_known_amax's scale, copied (the slot's next recorded cast overwrites it).
  at::Tensor sharded_weight_scale(int slot, const at::Tensor& whole_amax, bool record) {
    return slot_for_known_amax(slot, whole_amax, record).scale.clone();
  }

  // ---- step boundaries ----------------------------------------------------------------------
  // After the backward of every micro-batch. skip (optional 0-d device tensor, non-zero = the
  // step is skipped for non-finite values): delayed drops the step's amaxes.
  virtual void end_micro_batch(bool last_of_step, const at::Tensor& skip = at::Tensor()) = 0;
  // Delayed: one scale update of every slot. Current and block: nothing (scales come with each cast).
  virtual void update(const at::Tensor& skip = at::Tensor()) { (void)skip; }
  // Changes whenever a weight must be cast (and recorded) again; weights are cast at most once
  // per (weight version, epoch). Delayed: every scale update (step mode) or optimizer step
  // (microbatch mode); current and block: every optimizer step.
  virtual int64_t weight_epoch() const = 0;
  // Data parallel: reduces (MAX, in place, one collective) the amaxes ranks must agree on. Only
  // delayed scaling has such amaxes (its history row 0); the other recipes never call it: their
  // weight scales agree because the weights agree after the all-reduced step.
  virtual void set_amax_reducer(std::function<void(at::Tensor&)> reducer) { (void)reducer; }

  // ---- per-slot state on the device (tests, statistics, the precision chart) --------------------
  // amax_history [L, S]: delayed: the history (row 0 = the current amax); current: [1, S], the
  // amax of each slot's last recorded cast. scale / scale_inv [S]: delayed: what the next casts
  // use; current: those of the last recorded cast. Block: see block_scaling.h.
  virtual const at::Tensor& amax_history() const = 0;
  virtual const at::Tensor& scale() const = 0;
  virtual const at::Tensor& scale_inv() const = 0;

  // ---- FP8 health statistics ----------------------------------------------------------------
  // While on (log steps), recorded casts also accumulate each slot's saturated and underflow
  // fractions (add_stats; summed, divided by the count on read).
  void set_collect_stats(bool on) { collect_stats_ = on; }
  bool collect_stats() const { return collect_stats_ && !NoRecordScope::active(); }
  void add_stats(int index, const at::Tensor& fractions);  // fractions: float32 [2]
  // Reads the state on the host (log steps only) and resets the accumulated fractions.
  virtual std::vector<SlotStats> read_stats() = 0;

  // ---- checkpoints --------------------------------------------------------------------------
  // Tensors by name ("fp8.amax_history", ...). The trainer stores the recipe kind beside them.
  virtual std::map<std::string, at::Tensor> state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, at::Tensor>& state) = 0;

 protected:
  // Allocates the recipe's state for num_slots() slots on `device` (called once by finalize).
  virtual void allocate(const at::Device& device) = 0;
  // Whether a cast asked to record (opt.record) may: not under NoRecordScope.
  static bool recording(bool requested) { return requested && !NoRecordScope::active(); }
  // The accumulated fractions of slot i: {saturated, underflow} averaged over its casts, and
  // their reset (the read_stats helpers of the state classes).
  std::pair<float, float> stats_fractions(const at::Tensor& sums_cpu, int i) const;
  const at::Tensor& stats_sums() const { return stats_sum_; }
  void reset_stats() { stats_sum_.zero_(); }
  // read_stats of a per-tensor recipe (delayed, current): each slot's amax and scale (float32 [S],
  // any device) with its accumulated fractions; resets the fractions.
  std::vector<SlotStats> per_tensor_stats(const at::Tensor& amax, const at::Tensor& scale);
  // unsupported_linear of a recipe whose GEMMs need K and N multiples of 16 (cuBLASLt's FP8 rule;
  // the token count is checked when the GEMMs run): "" when both are; else the reason, naming
  // `gemm` ("block-scaled FP8 GEMM").
  static std::string dims_not_multiples_of_16(int64_t in_features, int64_t out_features, const char* gemm);
  // fp8_max of every slot's format, float32 [S] on the device.
  at::Tensor fp8_max_tensor() const;
  // The backend's form of opt's value companion (CastOptions::value_columnwise; an empty one when
  // that is null; checked: a scale with it).
  static ValueCompanion value_companion(const CastOptions& opt);

  Recipe recipe_;

 private:
  std::vector<std::string> names_;
  std::vector<Format> formats_;
  std::vector<TensorRole> roles_;
  std::optional<at::Device> device_;
  at::Tensor stats_sum_;  // [S, 3] saturated, underflow, count
  bool collect_stats_ = false;
};

// The state class of recipe.kind, from the registry of state classes (registry.cpp, the only code
// that names the concrete recipes). Checks the recipe's fields that the class relies on
// (fp8t::Error naming the key).
std::shared_ptr<Scaling> make_scaling(const Recipe& recipe);

}  // namespace fp8
}  // namespace fp8t
