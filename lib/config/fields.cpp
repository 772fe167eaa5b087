// The field table (one entry per key of the experiment file), the enum spellings and lookups
// over the table. See fields.h. Elsewhere: the entry builders (field_builders.h), the value
// parsers and printers (parse.cpp), the text helpers (text.cpp).
#include "lib/config/fields.h"

#include <algorithm>  // std::find, std::max
#include <limits>     // std::numeric_limits
#include <optional>   // std::optional
#include <string>     // std::string, std::to_string

#include "lib/config/field_builders.h"  // bool_field, int_field, ..., enum_field, EnumNames
#include "lib/config/text.h"            // join, shortest, edit_distance
#include "lib/config/fp8_recipe.h"      // fp8::kRecipeFormatNames, ...
#include "lib/config/moe_fields.h"      // add_moe_fields (the moe section)
#include "lib/config/fp8_recipe_fields.h"  // fp8::recipe_choices
#include "lib/numerics/scaling_math.h"  // fp8::kMaxMargin

namespace fp8t {
namespace config {
namespace {

// ---- the enum spellings -------------------------------------------------------------------

const EnumNames<DeviceKind>& device_names() {
  static const EnumNames<DeviceKind> n = {{DeviceKind::kAuto, "auto"}, {DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}};
  return n;
}
const EnumNames<Precision>& precision_names() {
  static const EnumNames<Precision> n = {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}, {Precision::kFp8, "fp8"}};
  return n;
}
const EnumNames<NormKind>& norm_names() {
  static const EnumNames<NormKind> n = {{NormKind::kLayerNorm, "layernorm"}, {NormKind::kRMSNorm, "rmsnorm"}};
  return n;
}
const EnumNames<Activation>& activation_names() {
  static const EnumNames<Activation> n = {{Activation::kGelu, "gelu"}, {Activation::kSwiGLU, "swiglu"}};
  return n;
}
const EnumNames<PositionKind>& position_names() {
  static const EnumNames<PositionKind> n = {{PositionKind::kLearned, "learned"}, {PositionKind::kRope, "rope"}};
  return n;
}
const EnumNames<DataSource>& source_names() {
  static const EnumNames<DataSource> n = {{DataSource::kSynthetic, "synthetic"}, {DataSource::kText, "text"}, {DataSource::kTokens, "tokens"}};
  return n;
}
const EnumNames<DataOrder>& order_names() {
  static const EnumNames<DataOrder> n = {{DataOrder::kRandom, "random"}, {DataOrder::kSequential, "sequential"}};
  return n;
}
const EnumNames<LrSchedule>& schedule_names() {
  static const EnumNames<LrSchedule> n = {{LrSchedule::kCosine, "cosine"}, {LrSchedule::kLinear, "linear"}, {LrSchedule::kConstant, "constant"}};
  return n;
}
const EnumNames<fp8::RecipeFormat>& format_names() {
  static const EnumNames<fp8::RecipeFormat> n(fp8::kRecipeFormatNames.begin(), fp8::kRecipeFormatNames.end());
  return n;
}
const EnumNames<fp8::AmaxUpdate>& amax_update_names() {
  static const EnumNames<fp8::AmaxUpdate> n(fp8::kAmaxUpdateNames.begin(), fp8::kAmaxUpdateNames.end());
  return n;
}
const EnumNames<fp8::RecipeKind>& recipe_kind_names() {
  static const EnumNames<fp8::RecipeKind> n(fp8::kRecipeKindNames.begin(), fp8::kRecipeKindNames.end());
  return n;
}
const EnumNames<ReduceDtype>& reduce_dtype_names() {
  static const EnumNames<ReduceDtype> n = {{ReduceDtype::kFp32, "fp32"}, {ReduceDtype::kBf16, "bf16"}};
  return n;
}
const EnumNames<MomentsDtype>& moments_dtype_names() {
  static const EnumNames<MomentsDtype> n = {{MomentsDtype::kFp32, "fp32"}, {MomentsDtype::kBf16, "bf16"}};
  return n;
}
const EnumNames<Recompute>& recompute_names() {
  static const EnumNames<Recompute> n = {
      {Recompute::kNone, "none"},      {Recompute::kActivation, "activation"}, {Recompute::kCasts, "casts"},
      {Recompute::kAttention, "attention"}, {Recompute::kMlp, "mlp"},          {Recompute::kBlock, "block"}};
  return n;
}
const EnumNames<AttentionBackend>& attention_backend_names() {
  static const EnumNames<AttentionBackend> n = {{AttentionBackend::kAuto, "auto"},
                                                {AttentionBackend::kFlash, "flash"},
                                                {AttentionBackend::kCudnn, "cudnn"},
                                                {AttentionBackend::kEfficient, "efficient"},
                                                {AttentionBackend::kMath, "math"}};
  return n;
}
const EnumNames<fp8::SwigluWgradCopy>& swiglu_wgrad_copy_names() {
  static const EnumNames<fp8::SwigluWgradCopy> n(fp8::kSwigluWgradCopyNames.begin(), fp8::kSwigluWgradCopyNames.end());
  return n;
}

const EnumNames<fp8::AmaxComputeAlgo>& algo_names() {
  static const EnumNames<fp8::AmaxComputeAlgo> n(fp8::kAmaxComputeAlgoNames.begin(), fp8::kAmaxComputeAlgoNames.end());
  return n;
}

// dist.zero: a number in files and flags (0, 1, 3), a ZeroStage in the config. Out of range
// and 2 are refused here, with the messages validate() gives other integer keys.
Field zero_field(std::string help) {
  Field f = basic_field("dist.zero", FieldType::kInt, std::move(help));
  f.range = Range{0.0, 3.0};
  f.get = [](const ExperimentConfig& c) -> Value { return zero_level(c.dist.zero); };
  f.set = [expected = f.expected()](ExperimentConfig& c, const Value& v) {
    const int64_t level = std::get<int64_t>(v);
    if (level < 0 || level > 3) throw ValueError("expected " + expected + ", got " + std::to_string(level));
    const std::optional<ZeroStage> stage = zero_stage_of_level(level);
    if (!stage) throw ValueError(zero_level_refusal(level));
    c.dist.zero = *stage;
  };
  return f;
}

// ---- the table ----------------------------------------------------------------------------

// Long on purpose: it is data, one entry per key in print order, kept in one piece so the whole
// schema reads top to bottom (each entry is a builder call from field_builders.h).
std::vector<Field> build_table() {
  std::vector<Field> t;
  // run
  t.push_back(string_field("run.name", "run folder name under run.out_dir",
                           [](auto& c) -> auto& { return c.run.name; }));
  t.push_back(string_field("run.out_dir", "directory that holds the run folders",
                           [](auto& c) -> auto& { return c.run.out_dir; }));
  t.push_back(uint_field("run.seed", "random seed (weights, data order, dropout)",
                         [](auto& c) -> auto& { return c.run.seed; }));
  t.push_back(enum_field("run.device", "auto: cuda when available, else cpu", device_names(),
                         [](auto& c) -> auto& { return c.run.device; }));
  t.push_back(bool_field("run.quiet",
                         "no progress on the console (status lines, evaluation progress, info messages); warnings, "
                         "errors and the final result line still print",
                         [](auto& c) -> auto& { return c.run.quiet; }));
  t.push_back(bool_field("run.overwrite", "allow replacing an existing run folder",
                         [](auto& c) -> auto& { return c.run.overwrite; }));
  t.push_back(bool_field("run.tensorboard", "also write TensorBoard event files into the run folder",
                         [](auto& c) -> auto& { return c.run.tensorboard; }));
  t.push_back(bool_field("run.accept_data_change",
                         "--resume: continue on data files that differ from those the checkpoint was trained on",
                         [](auto& c) -> auto& { return c.run.accept_data_change; }));
  // model
  t.push_back(int_field("model.vocab_size", "token vocabulary size (256 for byte-level text)",
                        [](auto& c) -> auto& { return c.model.vocab_size; }, at_least(1)));
  t.push_back(int_field("model.seq_len", "context length in tokens",
                        [](auto& c) -> auto& { return c.model.seq_len; }, at_least(1)));
  t.push_back(int_field("model.n_layer", "number of transformer blocks",
                        [](auto& c) -> auto& { return c.model.n_layer; }, at_least(1)));
  t.push_back(int_field("model.n_head", "attention heads per block (must divide model.d_model)",
                        [](auto& c) -> auto& { return c.model.n_head; }, at_least(1)));
  t.push_back(int_field("model.d_model", "residual stream width",
                        [](auto& c) -> auto& { return c.model.d_model; }, at_least(1)));
  t.push_back(int_field("model.d_ff", "MLP hidden width; 0 means 4 * d_model",
                        [](auto& c) -> auto& { return c.model.d_ff; }, at_least(0)));
  t.push_back(enum_field("model.norm", "normalisation layer", norm_names(),
                         [](auto& c) -> auto& { return c.model.norm; }));
  t.push_back(float_field("model.norm_eps", "epsilon of the normalisation layers",
                          [](auto& c) -> auto& { return c.model.norm_eps; }, greater_than(0)));
  t.push_back(enum_field("model.activation", "MLP activation", activation_names(),
                         [](auto& c) -> auto& { return c.model.activation; }));
  t.push_back(bool_field("model.bias", "bias terms in Linear and norm layers",
                         [](auto& c) -> auto& { return c.model.bias; }));
  t.push_back(float_field("model.dropout", "dropout probability (0 disables)",
                          [](auto& c) -> auto& { return c.model.dropout; }, half_open(0, 1)));
  t.push_back(bool_field("model.tie_embeddings", "share the token embedding with the output head",
                         [](auto& c) -> auto& { return c.model.tie_embeddings; }));
  t.push_back(enum_field("model.position", "positions: a learned table (GPT-2) or rotary q/k (RoPE, LLaMA)",
                         position_names(), [](auto& c) -> auto& { return c.model.position; }));
  t.push_back(float_field("model.rope_theta", "RoPE base frequency (model.position rope; Llama 3: 500000)",
                          [](auto& c) -> auto& { return c.model.rope_theta; }, greater_than(0)));
  t.push_back(int_field("model.n_kv_head", "K/V heads, grouped-query attention (must divide model.n_head); 0 means n_head",
                        [](auto& c) -> auto& { return c.model.n_kv_head; }, at_least(0)));
  t.push_back(bool_field("model.fused_qkv", "q, k, v from one GEMM (attn.c_attn); false: attn.q_proj, k_proj, v_proj",
                         [](auto& c) -> auto& { return c.model.fused_qkv; }));
  t.push_back(bool_field("model.qk_norm", "RMSNorm of the q and k projections over their full width, before RoPE (OLMoE)",
                         [](auto& c) -> auto& { return c.model.qk_norm; }));
  t.push_back(string_field("model.init_from", "safetensors file with the starting weights (fp8train or Hugging Face names)",
                           [](auto& c) -> auto& { return c.model.init_from; }));
  add_moe_fields(t);  // moe.* (lib/config/moe_fields.cpp)
  // data
  t.push_back(enum_field("data.source", "synthetic data, a text file (bytes) or a token file", source_names(),
                         [](auto& c) -> auto& { return c.data.source; }));
  t.push_back(string_list_field("data.train_path", "text files, llm.c shards or nanoGPT .bin (source text|tokens): paths or globs, a list or a,b",
                                [](auto& c) -> auto& { return c.data.train_path; }));
  t.push_back(string_list_field("data.val_path", "optional separate validation files (paths or globs); else data.val_fraction of train",
                                [](auto& c) -> auto& { return c.data.val_path; }));
  t.push_back(float_field("data.val_fraction", "contiguous tail of the training data used for validation",
                          [](auto& c) -> auto& { return c.data.val_fraction; }, open_interval(0, 1)));
  t.push_back(enum_field("data.order", "random: windows drawn with replacement; sequential: a shuffled pass, each window once per epoch",
                         order_names(), [](auto& c) -> auto& { return c.data.order; }));
  // train
  t.push_back(int_field("train.steps", "optimizer steps",
                        [](auto& c) -> auto& { return c.train.steps; }, at_least(1)));
  t.push_back(int_field("train.micro_batch_size", "sequences per forward/backward pass",
                        [](auto& c) -> auto& { return c.train.micro_batch_size; }, at_least(1)));
  t.push_back(int_field("train.grad_accum_steps", "micro-batches accumulated per optimizer step",
                        [](auto& c) -> auto& { return c.train.grad_accum_steps; }, at_least(1)));
  t.push_back(float_field("train.lr", "peak learning rate",
                          [](auto& c) -> auto& { return c.train.lr; }, greater_than(0)));
  t.push_back(float_field("train.min_lr", "final learning rate of the decay (<= train.lr)",
                          [](auto& c) -> auto& { return c.train.min_lr; }, at_least(0)));
  t.push_back(int_field("train.warmup_steps", "linear warmup steps (<= train.steps)",
                        [](auto& c) -> auto& { return c.train.warmup_steps; }, at_least(0)));
  t.push_back(enum_field("train.schedule", "learning-rate decay after warmup", schedule_names(),
                         [](auto& c) -> auto& { return c.train.schedule; }));
  t.push_back(float_field("train.weight_decay", "AdamW decoupled weight decay",
                          [](auto& c) -> auto& { return c.train.weight_decay; }, at_least(0)));
  t.push_back(float_field("train.beta1", "AdamW beta1",
                          [](auto& c) -> auto& { return c.train.beta1; }, half_open(0, 1)));
  t.push_back(float_field("train.beta2", "AdamW beta2",
                          [](auto& c) -> auto& { return c.train.beta2; }, half_open(0, 1)));
  t.push_back(float_field("train.eps", "AdamW epsilon",
                          [](auto& c) -> auto& { return c.train.eps; }, greater_than(0)));
  t.push_back(enum_field("train.moments_dtype",
                         "storage of the AdamW moments: fp32, or bf16 (rounded after each FP32 update; 4 bytes per "
                         "parameter less)",
                         moments_dtype_names(), [](auto& c) -> auto& { return c.train.moments_dtype; }));
  t.push_back(float_field("train.grad_clip", "global-norm gradient clip; 0 disables",
                          [](auto& c) -> auto& { return c.train.grad_clip; }, at_least(0)));
  t.push_back(int_field("train.eval_interval", "steps between evaluations; 0 disables periodic eval (a final eval still runs)",
                        [](auto& c) -> auto& { return c.train.eval_interval; }, at_least(0)));
  t.push_back(int_field("train.eval_batches", "validation batches per evaluation",
                        [](auto& c) -> auto& { return c.train.eval_batches; }, at_least(0)));
  t.push_back(int_field("train.log_interval", "steps between log lines",
                        [](auto& c) -> auto& { return c.train.log_interval; }, at_least(1)));
  t.push_back(int_field("train.checkpoint_interval", "steps between checkpoints; 0: only the final checkpoint",
                        [](auto& c) -> auto& { return c.train.checkpoint_interval; }, at_least(0)));
  t.push_back(float_field("train.checkpoint_every_min",
                          "also checkpoint when this many minutes passed since the last checkpoint; 0 disables",
                          [](auto& c) -> auto& { return c.train.checkpoint_every_min; }, at_least(0)));
  t.push_back(int_field("train.keep_checkpoints",
                        "checkpoints kept: checkpoint.pt and the newest N-1 before it, as checkpoint.step-<S>.pt "
                        "(continue from one with --resume-from S)",
                        [](auto& c) -> auto& { return c.train.keep_checkpoints; }, at_least(1)));
  t.push_back(int_field("train.max_skipped_steps",
                        "consecutive non-finite (skipped) steps after which the run stops as diverged",
                        [](auto& c) -> auto& { return c.train.max_skipped_steps; }, at_least(1)));
  t.push_back(float_field("train.loss_scale_init", "precision fp16: initial dynamic loss scale",
                          [](auto& c) -> auto& { return c.train.loss_scale_init; }, greater_than(0)));
  t.push_back(float_field("train.loss_scale_growth_factor",
                          "precision fp16: the loss scale is multiplied by this after loss_scale_growth_interval finite steps",
                          [](auto& c) -> auto& { return c.train.loss_scale_growth_factor; }, greater_than(1)));
  t.push_back(float_field("train.loss_scale_backoff",
                          "precision fp16: the loss scale is multiplied by this after a step with inf/NaN gradients",
                          [](auto& c) -> auto& { return c.train.loss_scale_backoff; }, open_interval(0, 1)));
  t.push_back(int_field("train.loss_scale_growth_interval", "precision fp16: finite steps between loss-scale growths",
                        [](auto& c) -> auto& { return c.train.loss_scale_growth_interval; }, at_least(1)));
  t.push_back(enum_field("train.recompute",
                         "activations recomputed in the backward instead of saved: none, activation (fp8: the "
                         "MLP activation's FP8 copy), casts (fp8: every FP8 copy that can be cast again, weights' "
                         "transposes included), attention, mlp or block",
                         recompute_names(), [](auto& c) -> auto& { return c.train.recompute; }));
  t.push_back(bool_field("train.cuda_graphs",
                         "CUDA: capture the training step as one CUDA graph and replay it; false launches kernels "
                         "one by one (runs that cannot be captured fall back on their own, with the reason logged)",
                         [](auto& c) -> auto& { return c.train.cuda_graphs; }));
  t.push_back(int_field("train.loss_chunk_mib",
                        "bf16/fp8: the LM head and the loss run in chunks of rows holding at most this many MiB "
                        "of BF16 logits (at most 1048576, 1 TiB); larger chunks mean fewer, larger head GEMMs and more memory",
                        [](auto& c) -> auto& { return c.train.loss_chunk_mib; }, Range{1.0, 1048576.0}));
  t.push_back(bool_field("train.gemm_autotune",
                         "CUDA: time the cuBLASLt heuristic's first 8 algorithms for each FP8/BF16 GEMM of the step "
                         "on its first use and keep the fastest (if 3% faster than the first); a GEMM's algorithm "
                         "sets its accumulation order, so two runs may then differ in the last bits",
                         [](auto& c) -> auto& { return c.train.gemm_autotune; }));
  t.push_back(enum_field("train.attention_backend",
                         "CUDA: the attention kernel tried first: auto (cudnn on Hopper and newer, where it was "
                         "measured faster; elsewhere flash), flash, cudnn, efficient or math; a backend that cannot "
                         "run a shape falls back to the next (docs/precision.md: Attention)",
                         attention_backend_names(), [](auto& c) -> auto& { return c.train.attention_backend; }));
  // precision
  // dist
  t.push_back(int_field("dist.timeout_s",
                        "data-parallel runs: seconds a rendezvous or collective may wait for the other ranks "
                        "before the job fails",
                        [](auto& c) -> auto& { return c.dist.timeout_s; }, at_least(1)));
  t.push_back(float_field("dist.bucket_mb", "data-parallel runs: gradient all-reduce bucket size in MiB",
                          [](auto& c) -> auto& { return c.dist.bucket_mb; }, greater_than(0)));
  t.push_back(zero_field("data-parallel runs: 0 = every rank holds everything (DDP); 1 = ZeRO-1, the AdamW moments "
                         "and the FP32 gradients sharded across the ranks (each updates its shard of the FP32 "
                         "weights, then they are all-gathered); 3 = ZeRO-3, the FP32 weights, gradients and AdamW "
                         "moments sharded, each unit's weights gathered only while it computes"));
  t.push_back(bool_field("dist.reshard_after_forward",
                         "dist.zero 3: free a unit's gathered weights after its forward and gather them again for "
                         "its backward; false keeps them from forward to backward (more memory, fewer all-gathers)",
                         [](auto& c) -> auto& { return c.dist.reshard_after_forward; }));
  t.push_back(enum_field("dist.reduce_dtype",
                         "dist.zero 3: the dtype gradients are reduce-scattered in (fp32, or bf16: half the bytes)",
                         reduce_dtype_names(), [](auto& c) -> auto& { return c.dist.reduce_dtype; }));
  t.push_back(int_field("dist.prefetch",
                        "dist.zero 3: units whose all-gather may be in flight ahead of the unit computing "
                        "(0: each unit is gathered when it is needed)",
                        [](auto& c) -> auto& { return c.dist.prefetch; }, at_least(0)));
  t.push_back(int_field("dist.shard_group_size",
                        "dist.zero 3: shard the state within groups of this many consecutive ranks and replicate "
                        "it across the groups (hybrid sharding); 0 = all ranks, -1 = one group per node "
                        "(torchrun's LOCAL_WORLD_SIZE); it must divide the number of ranks",
                        [](auto& c) -> auto& { return c.dist.shard_group_size; }, at_least(-1)));
  t.push_back(int_field("dist.expert_parallel",
                        "moe.experts > 0: shard the experts across groups of this many consecutive ranks and send each "
                        "token to its experts' rank by all-to-all (it must divide the ranks and moe.experts); 1: every "
                        "rank holds every expert",
                        [](auto& c) -> auto& { return c.dist.expert_parallel; }, at_least(1)));
  t.push_back(enum_field("precision", "numeric precision of the Linear layers", precision_names(),
                         [](auto& c) -> auto& { return c.precision; }));
  // fp8
  t.push_back(enum_field("fp8.recipe", fp8::recipe_choices(),  // the registry's list
                         recipe_kind_names(), [](auto& c) -> auto& { return c.fp8.kind; }));
  t.push_back(bool_field("fp8.block_power_of_2_scales", "block recipe: round every block scale down to a power of 2",
                         [](auto& c) -> auto& { return c.fp8.block_power_of_2_scales; }));
  t.push_back(int_field("fp8.margin", "scale = (fp8_max * 2^-margin) / amax; negative margins allowed",
                        [](auto& c) -> auto& { return c.fp8.margin; },
                        Range{-1.0 * fp8::kMaxMargin, 1.0 * fp8::kMaxMargin}));
  t.push_back(int_field("fp8.interval", "recompute scales every `interval` updates (history rolls every update)",
                        [](auto& c) -> auto& { return c.fp8.interval; }, at_least(1)));
  t.push_back(enum_field("fp8.fp8_format", "HYBRID: E4M3 forward, E5M2 gradients; E4M3: every tensor E4M3",
                         format_names(), [](auto& c) -> auto& { return c.fp8.fp8_format; },
                         {{"E5M2", "Transformer Engine rejects pure E5M2 (HYBRID uses E5M2 for the gradients)"}}));
  t.push_back(int_field("fp8.amax_history_len", "amax history window per tensor",
                        [](auto& c) -> auto& { return c.fp8.amax_history_len; }, at_least(1)));
  t.push_back(enum_field("fp8.amax_compute_algo", "amax from the history: its max, or the most recent entry",
                         algo_names(), [](auto& c) -> auto& { return c.fp8.amax_compute_algo; }));
  t.push_back(enum_field("fp8.amax_update",
                         "step: one scale update per optimizer step (amax over its micro-batches); microbatch: "
                         "one per micro-batch, as TransformerEngine",
                         amax_update_names(), [](auto& c) -> auto& { return c.fp8.amax_update; }));
  t.push_back(enum_field("fp8.swiglu_wgrad_copy",
                         "SwiGLU MLPs: c_proj's FP8 wgrad copy of the activation written in the backward by c_fc's "
                         "gradient cast (backward: 1 byte per hidden element less kept per layer), or cast in the "
                         "forward and kept (forward); the same codes",
                         swiglu_wgrad_copy_names(), [](auto& c) -> auto& { return c.fp8.swiglu_wgrad_copy; }));
  t.push_back(bool_field("fp8.reduce_amax", "data-parallel: MAX-reduce amaxes across ranks before each scale update",
                         [](auto& c) -> auto& { return c.fp8.reduce_amax; }));
  t.push_back(gemm_flags_field("fp8.override_linear_precision", "GEMMs of every FP8 Linear that run in high precision instead",
                               [](auto& c) -> auto& { return c.fp8.override_linear_precision; }));
  t.push_back(gemm_flags_field("fp8.fast_accumulation", "fast (non-promoting) FP8 accumulation per GEMM on the GPU",
                               [](auto& c) -> auto& { return c.fp8.fast_accumulation; }));
  t.push_back(string_list_field("fp8.skip_layers", "module names (exact, or a suffix after '.') kept in high precision",
                                [](auto& c) -> auto& { return c.fp8.skip_layers; }));
  t.push_back(int_field("fp8.min_features_product", "Linears with in*out features below this stay in high precision; 0 converts all",
                        [](auto& c) -> auto& { return c.fp8.min_features_product; }, at_least(0)));
  t.push_back(bool_field("fp8.stats", "per-layer FP8 saturation/underflow statistics on log steps",
                         [](auto& c) -> auto& { return c.fp8.stats; }));
  t.push_back(bool_field("fp8.attention",
                         "attention in FP8 (Q, K, V, O, dO and the softmax P, dP): cuDNN's fused FP8 attention on the "
                         "GPU, its emulation on the CPU; no dropout. Experimental: measured +1.2% validation loss (LLaMA-125M) "
                         "and 1% slower (LLaMA-3B, sequence 8192, H100) than bf16 attention (docs/fp8.md)",
                         [](auto& c) -> auto& { return c.fp8.attention; }));
  return t;
}

}  // namespace

// ---- Range --------------------------------------------------------------------------------

bool Range::contains(double v) const {
  if (lo && (lo_open ? !(v > *lo) : !(v >= *lo))) return false;
  if (hi && (hi_open ? !(v < *hi) : !(v <= *hi))) return false;
  return true;
}

std::string Range::describe() const {
  if (lo && hi) {
    return "in " + std::string(lo_open ? "(" : "[") + shortest(*lo) + ", " + shortest(*hi) + (hi_open ? ")" : "]");
  }
  if (lo) return (lo_open ? "> " : ">= ") + shortest(*lo);
  if (hi) return (hi_open ? "< " : "<= ") + shortest(*hi);
  return "";
}

Range at_least(double lo) { return Range{lo, std::nullopt, false, false}; }
Range greater_than(double lo) { return Range{lo, std::nullopt, true, false}; }
Range half_open(double lo, double hi) { return Range{lo, hi, false, true}; }
Range open_interval(double lo, double hi) { return Range{lo, hi, true, true}; }

// ---- Field --------------------------------------------------------------------------------

std::string Field::section() const {
  const auto dot = key.find('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

std::string Field::name() const {
  const auto dot = key.find('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string Field::type_name() const {
  switch (type) {
    case FieldType::kBool: return "bool";
    case FieldType::kInt: return "int";
    case FieldType::kUInt: return "uint64";
    case FieldType::kFloat: return "float";
    case FieldType::kString: return "string";
    case FieldType::kEnum: return join(choices, "|");
    case FieldType::kGemmFlags: return "{fprop,dgrad,wgrad}";
    case FieldType::kStringList: return "list of strings";
  }
  return "?";
}

std::string Field::expected() const {
  // Appended, not `" " + describe()`: GCC 12 reports a false -Wstringop-overflow for a literal + a temporary.
  std::string r;
  if (range) r.append(" ").append(range->describe());
  switch (type) {
    case FieldType::kBool: return "a boolean (true/false, yes/no, 1/0)";
    case FieldType::kInt: return "an integer" + r;
    case FieldType::kUInt: return "a non-negative integer";
    case FieldType::kFloat: return "a number" + r;
    case FieldType::kString: return "a string";
    case FieldType::kEnum: return "one of " + join(choices, ", ");
    case FieldType::kGemmFlags:
      return "a mapping {fprop: bool, dgrad: bool, wgrad: bool}, a list of three booleans, or "
             "fprop,dgrad,wgrad text such as 0,0,1";
    case FieldType::kStringList: return "a list of strings (or comma-separated names)";
  }
  return "?";
}

// ---- lookup -------------------------------------------------------------------------------

const std::vector<Field>& fields() {
  static const std::vector<Field> table = build_table();
  return table;
}

const Field* find_field(std::string_view key) {
  for (const auto& f : fields()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

const std::vector<std::string>& top_level_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& f : fields()) {
      const std::string top = f.section().empty() ? f.key : f.section();
      if (std::find(out.begin(), out.end(), top) == out.end()) out.push_back(top);
    }
    return out;
  }();
  return names;
}

std::string closest_key(std::string_view key) {
  const auto dot = key.rfind('.');
  const std::string_view leaf = dot == std::string_view::npos ? key : key.substr(dot + 1);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  auto consider = [&](const std::string& candidate, size_t d) {
    if (d < best_d) {
      best_d = d;
      best = candidate;
    }
  };
  for (const auto& f : fields()) {
    consider(f.key, edit_distance(key, f.key));
    consider(f.key, edit_distance(leaf, f.name()));
  }
  if (dot == std::string_view::npos) {
    for (const auto& top : top_level_names()) consider(top, edit_distance(key, top));
  }
  const size_t limit = std::max<size_t>(2, leaf.size() / 3);
  return best_d <= limit && best != key ? best : "";
}

std::string did_you_mean(std::string_view key) {
  const std::string best = closest_key(key);
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

std::vector<std::string> differing_keys(const ExperimentConfig& a, const ExperimentConfig& b) {
  std::vector<std::string> out;
  for (const auto& f : fields()) {
    if (f.get(a) != f.get(b)) out.push_back(f.key);
  }
  return out;
}

const char* to_string(DeviceKind v) { return enum_name(device_names(), v); }
const char* to_string(Precision v) { return enum_name(precision_names(), v); }
const char* to_string(NormKind v) { return enum_name(norm_names(), v); }
const char* to_string(Activation v) { return enum_name(activation_names(), v); }
const char* to_string(DataSource v) { return enum_name(source_names(), v); }
const char* to_string(DataOrder v) { return enum_name(order_names(), v); }
const char* to_string(LrSchedule v) { return enum_name(schedule_names(), v); }

}  // namespace config

bool operator==(const ExperimentConfig& a, const ExperimentConfig& b) {
  return config::differing_keys(a, b).empty();
}

}  // namespace fp8t
