// The experiment schema: plain structs with defaults. One ExperimentConfig describes a run
// completely; it is what `--print-config` prints and what the run folder's config.yaml holds.
//
// Defaults < YAML file < CLI flags (lib/config/loader.h, cli_flags.h). Validation lives in
// lib/config/validate.h. Every key here has one entry in the field table of
// lib/config/fields.cpp (name, help text, range), which drives YAML reading, `--set`,
// printing and `--help`.
#pragma once

#include <cstdint>  // int64_t, uint64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/config/fp8_recipe.h"  // fp8::Recipe (the `fp8` section)
#include "lib/config/parallel_layout.h"  // ZeroStage (dist.zero)

namespace fp8t {

enum class DeviceKind { kAuto, kCpu, kCuda };
enum class Precision { kFp32, kBf16, kFp16, kFp8 };
enum class NormKind { kLayerNorm, kRMSNorm };
enum class Activation { kGelu, kSwiGLU };
enum class PositionKind { kLearned, kRope };
enum class DataSource { kSynthetic, kText, kTokens };
enum class DataOrder { kRandom, kSequential };
enum class LrSchedule { kCosine, kLinear, kConstant };
// Selective activation recompute in the backward: what each block recomputes instead of saving.
// kActivation: only the FP8 copy of the MLP activation's output that c_proj's wgrad reads (cast
// again from the saved activation input; lib/fp8/layers/fp8_activation.h); no GEMM runs twice.
// kCasts: kActivation, plus every other FP8 copy the backward can cast again from what it keeps
// anyway: the attention output projection's column-wise input copy (from attention's saved
// output) and each block weight's transposed copy (from its row-wise FP8 codes). Same bits.
enum class Recompute { kNone, kActivation, kCasts, kAttention, kMlp, kBlock };
// Storage of the AdamW moments (exp_avg, exp_avg_sq). The update itself always runs in FP32;
// kBf16 rounds both moments to bfloat16 after each step (4 bytes/parameter less).
enum class MomentsDtype { kFp32, kBf16 };
// The dtype gradients travel in when they are reduced across ranks (dist.reduce_dtype).
enum class ReduceDtype { kFp32, kBf16 };
// Which fused kernel runs scaled-dot-product attention on a CUDA device (train.attention_backend;
// lib/model/attention_backend.h). kAuto: fp8train's measured choice for the GPU; the others put
// that backend first, and ATen falls back to the next one where it refuses a shape.
enum class AttentionBackend { kAuto, kFlash, kCudnn, kEfficient, kMath };
// A mixture of experts' router (lib/model/moe_router.h): the score of each expert for a token, and
// how the experts' load is kept even (an auxiliary loss, DeepSeek's bias on the selection, or none).
enum class RouterScore { kSoftmax, kSigmoid };
enum class LoadBalance { kAuxLoss, kBias, kNone };

// The `moe` section: a mixture-of-experts MLP in the blocks (lib/model/moe_model.h). experts > 0
// makes the model the MoE family; 0 (the default) is a dense model and the other keys are unused.
struct MoeSection {
  int64_t experts = 0;            // routed experts per MoE block; 0: dense MLPs everywhere
  int64_t top_k = 2;              // experts each token goes to (dropless: every token gets all k)
  int64_t d_ff = 0;               // each expert's SwiGLU width; 0 means model.d_ff (or 4 * d_model)
  int64_t shared_experts = 0;     // experts every token goes through: one SwiGLU of shared_experts * d_ff
  RouterScore score = RouterScore::kSoftmax;  // softmax over the experts, or a sigmoid per expert
  bool norm_topk = false;         // the k chosen scores renormalised to sum 1 (sigmoid: always)
  LoadBalance balance = LoadBalance::kAuxLoss;
  double aux_loss_coef = 0.01;    // balance aux_loss: the loss coef * E * sum_e f_e * P_e is added
  double bias_update_rate = 1e-3;  // balance bias: each step, bias_e += rate * sign(mean load - load_e)
  int64_t first_k_dense = 0;      // the first blocks keep a dense MLP of model.d_ff
  // Benchmarks: token t's j-th expert is (t * top_k + j) mod experts, whatever the router scores
  // (which still weigh the outputs and learn): every expert gets the same tokens, as a peer's
  // forced-balanced routing does. Not for training a model.
  bool force_balance = false;

  bool enabled() const { return experts > 0; }
};

struct RunSection {
  std::string name = "default";   // run folder name under out_dir
  std::string out_dir = "runs";
  uint64_t seed = 1337;
  DeviceKind device = DeviceKind::kAuto;  // auto: cuda when available, else cpu
  bool quiet = false;             // no per-step console status lines (errors still print)
  bool overwrite = false;         // allow replacing an existing run folder
  bool tensorboard = false;       // also write TensorBoard event files into the run folder
  // --resume: continue although the data files differ from those the checkpoint was trained on
  // (lib/train/job_fingerprint.h data_record); without it that is exit 2 naming the files.
  bool accept_data_change = false;
};

struct ModelSection {
  int64_t vocab_size = 64;
  int64_t seq_len = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t d_model = 128;
  int64_t d_ff = 0;               // 0 means 4 * d_model
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::kGelu;
  bool bias = true;
  double dropout = 0.0;
  bool tie_embeddings = false;
  PositionKind position = PositionKind::kLearned;  // learned: a position table; rope: rotary q/k
  double rope_theta = 10000.0;    // RoPE base (Llama 3: 500000)
  int64_t n_kv_head = 0;          // K/V heads (grouped-query attention); 0 means n_head
  bool fused_qkv = true;          // q, k, v from one GEMM (c_attn); false: q_proj, k_proj, v_proj
  bool qk_norm = false;           // RMSNorm of the q and k projections (full width) before RoPE (OLMoE)
  std::string init_from;          // safetensors file with the starting weights; empty: random init
  MoeSection moe;                 // the `moe` section (its own section in files and flags)

  int64_t ff_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }
  int64_t expert_ff_dim() const { return moe.d_ff > 0 ? moe.d_ff : ff_dim(); }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
};

struct DataSection {
  DataSource source = DataSource::kSynthetic;
  std::vector<std::string> train_path;  // files or glob patterns: text, llm.c shards or nanoGPT .bin (source text|tokens)
  std::vector<std::string> val_path;    // optional separate validation files; else val_fraction of train
  double val_fraction = 0.1;      // contiguous tail of the training data used for validation
  DataOrder order = DataOrder::kRandom;  // random: windows drawn with replacement; sequential: each once per epoch
};

struct TrainSection {
  int64_t steps = 200;
  int64_t micro_batch_size = 16;
  int64_t grad_accum_steps = 1;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 20;
  LrSchedule schedule = LrSchedule::kCosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  MomentsDtype moments_dtype = MomentsDtype::kFp32;  // storage of the AdamW moments
  double grad_clip = 1.0;         // global-norm clip; 0 disables
  int64_t eval_interval = 50;    // 0 disables periodic eval (a final eval still runs)
  int64_t eval_batches = 8;
  int64_t log_interval = 10;
  int64_t checkpoint_interval = 0;  // 0: only the final checkpoint
  double checkpoint_every_min = 30.0;  // also checkpoint when this many minutes passed since the last one; 0 disables
  int64_t keep_checkpoints = 2;  // checkpoints kept: checkpoint.pt and the newest N-1 before it (checkpoint.step-<S>.pt)
  int64_t max_skipped_steps = 5;  // consecutive non-finite (skipped) steps before the run stops as diverged
  // Dynamic loss scaling (precision fp16), torch.amp.GradScaler's rules.
  double loss_scale_init = 65536.0;       // initial scale (2^16)
  double loss_scale_growth_factor = 2.0;  // scale *= this after loss_scale_growth_interval finite steps
  double loss_scale_backoff = 0.5;        // scale *= this after a step with inf/NaN gradients
  int64_t loss_scale_growth_interval = 2000;
  Recompute recompute = Recompute::kNone;  // activations recomputed in the backward instead of saved
  // CUDA: capture the whole training step as one CUDA graph and replay it (lib/step/step_graph.h);
  // where that is not correct the run falls back to launching kernels one by one, with a logged reason.
  bool cuda_graphs = true;
  // bf16/fp8: the LM head and the loss run in chunks of rows holding at most this many MiB of
  // BF16 logits (lib/ops/linear_cross_entropy.h); larger: fewer, larger head GEMMs, more memory.
  int64_t loss_chunk_mib = 512;
  // CUDA: time the cuBLASLt heuristic's first candidates for each FP8/BF16 GEMM of lib/gemm on its
  // first use and keep the fastest (lib/gemm/gemm_autotune.h); off: the heuristic's first choice.
  bool gemm_autotune = false;
  // CUDA: the scaled-dot-product attention kernel tried first (lib/model/attention_backend.h).
  AttentionBackend attention_backend = AttentionBackend::kAuto;
};

// Data-parallel settings (used only when launched by torchrun, lib/dist/launch.h).
struct DistSection {
  int64_t timeout_s = 600;        // a collective or the rendezvous waiting longer fails the job
  double bucket_mb = 25.0;        // gradient all-reduce bucket size in MiB
  // dist.zero: 0 DDP (every rank holds everything); 1 ZeRO-1, the AdamW moments and the weight
  // update sharded across ranks; 3 ZeRO-3, weights, gradients and optimizer state sharded (2 is
  // refused). Asked through ParallelLayout (lib/config/parallel_layout.h), never as a number.
  ZeroStage zero = ZeroStage::kNone;
  // zero 3: free a unit's gathered weights after its forward and gather them again for its
  // backward (true), or keep them from forward to backward (false).
  bool reshard_after_forward = true;
  ReduceDtype reduce_dtype = ReduceDtype::kFp32;  // zero 3: gradients reduce-scattered in this dtype
  int64_t prefetch = 1;           // zero 3: units whose all-gather may be in flight ahead of the one computing
  int64_t shard_group_size = 0;   // zero 3: shard within groups of this many consecutive ranks (0: all ranks)
  // A mixture of experts' experts sharded across groups of this many consecutive ranks, tokens
  // sent to their experts' rank by all-to-all (lib/dist/expert_parallel.h); 1: every rank holds
  // every expert.
  int64_t expert_parallel = 1;
};

struct ExperimentConfig {
  RunSection run;
  ModelSection model;
  DataSection data;
  TrainSection train;
  DistSection dist;
  Precision precision = Precision::kFp32;
  fp8::Recipe fp8;
};

}  // namespace fp8t
