// train.recompute on the GPU (bf16 autocast and fp8 through step::Session): the backward runs on
// CUDA's autograd worker thread, which must get the forward's autocast state; every mode trains
// like none and keeps less memory. The GPU's backward kernels (flash attention's, atomics in
// reductions) are not bit-reproducible run to run, attention runs on its math backend here
// (deterministic); but a mode's parts may run other kernels than none's fused ones (an add and a
// norm where none fuses them, e.g. before ln_f), equal to rounding only. AdamW turns such
// last-bit differences of near-zero gradients into lr-sized weight changes (seen: 13% gradient
// differences after two steps in fp8), so the gradients compared are those of the initial
// weights, within a tolerance (below); the steps check the losses, the memory and the amaxes. FP8: every slot's history holds as many amaxes as with none (the first pass
// records nothing, so the recompute on the worker thread must).
#include <torch/torch.h>  // torch::cuda::is_available

#include <algorithm>  // std::max
#include <vector>     // std::vector

#include "lib/config/fp8_recipe.h"         // fp8::RecipeKind, fp8::to_string
#include "lib/fp8/recipes/scaling.h"       // fp8::Scaling (session.scaling())
#include "lib/model/gpt.h"                 // model::Gpt
#include "lib/step/session.h"              // step::Session
#include "lib/util/memory.h"               // reset_peak_memory, peak_memory_bytes
#include "lib/util/torch_compat.h"         // compat::AutocastGuard
#include "tests/catch.h"
#include "tests/kernels/cuda_test_util.h"  // test::MathAttentionOnly

using namespace fp8t;

namespace {

ExperimentConfig small_gpu(Precision precision, Recompute mode) {
  ExperimentConfig c;
  c.precision = precision;
  c.run.device = DeviceKind::kCuda;
  c.model.vocab_size = 512;
  c.model.n_layer = 4;
  c.model.d_model = 256;
  c.model.n_head = 4;
  c.model.seq_len = 256;
  c.model.position = PositionKind::kRope;  // RoPE's rotated q/k are part of what attention drops
  c.train.micro_batch_size = 8;
  c.train.grad_accum_steps = 2;
  c.train.recompute = mode;
  return c;
}

struct Outcome {
  double loss;
  std::vector<at::Tensor> grads;  // of a forward/backward before the steps, on the CPU
  int64_t peak;                   // bytes allocated at most during the last step
  at::Tensor recorded_rows;       // fp8: per slot, the history rows holding an amax
};

Outcome train_two_steps(Precision precision, Recompute mode) {
  const at::Device cuda(at::kCUDA);
  step::Session session(small_gpu(precision, mode), cuda);
  session.prepare_training(nullptr);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
  auto next = [&] {
    const at::Tensor t = at::randint(512, {8, 257}, gen, at::kLong);
    return data::Batch{t.narrow(1, 0, 256).contiguous(), t.narrow(1, 1, 256).contiguous()};
  };
  // The gradients of one forward/backward on the initial weights (before AdamW turns last-bit
  // differences of near-zero gradients into lr-sized weight changes).
  Outcome o{0.0, {}, 0, at::Tensor()};
  {
    const data::Batch b = next();
    model::Gpt::loss(session.model().forward(b.inputs.to(cuda)), b.targets.to(cuda)).backward();
    for (const at::Tensor& p : session.parameters()) o.grads.push_back(p.grad().cpu().to(at::kDouble));
    for (const at::Tensor& p : session.parameters()) p.mutable_grad().reset();
  }
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(cuda));
  session.step(next, 1e-3, loss_sum);
  torch::cuda::synchronize();
  release_cached_memory(cuda);
  reset_peak_memory(cuda);
  session.step(next, 1e-3, loss_sum);
  torch::cuda::synchronize();
  o.loss = loss_sum.item<double>();
  o.peak = peak_memory_bytes(cuda);
  if (session.scaling() != nullptr) o.recorded_rows = (session.scaling()->amax_history() != 0).sum(0).cpu();
  return o;
}

double rel_err(const at::Tensor& a, const at::Tensor& ref) {
  return ((a - ref).norm() / (ref.norm() + 1e-30)).item<double>();
}

}  // namespace

TEST_CASE("recompute on CUDA: bf16 and fp8 train like none and keep less memory", "[model][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  const test::MathAttentionOnly math;
  const Precision precision = GENERATE(Precision::kBf16, Precision::kFp8);
  INFO("precision " << static_cast<int>(precision));
  const Outcome none = train_two_steps(precision, Recompute::kNone);
  int64_t activation_peak = 0;
  for (Recompute mode :
       {Recompute::kActivation, Recompute::kCasts, Recompute::kAttention, Recompute::kMlp, Recompute::kBlock}) {
    // activation and casts change only FP8 runs (FP8 copies cast again in the backward).
    const bool fp8_only = mode == Recompute::kActivation || mode == Recompute::kCasts;
    if (fp8_only && precision != Precision::kFp8) continue;
    INFO("recompute " << static_cast<int>(mode));
    const Outcome o = train_two_steps(precision, mode);
    WARN("recompute " << static_cast<int>(mode) << ": peak " << o.peak << " B (none " << none.peak << " B)");
    // The same kernels on the same inputs, except an add and a norm run unfused where none fuses
    // them: equal up to rounding. Seen on an H200 (commit 5e81f5f, docs/benchmarks.md): every
    // mode's gradients within 7.8e-7 relative of none's (bf16), fp8 attention 2.4e-7, fp8
    // activation 0. The bound 5e-6 is six times the largest of them, room for other rounding
    // orders of the unfused kernels, and far below a wrong gradient (1e-3 and more).
    constexpr double kGradTolerance = 5e-6;
    CHECK(o.loss == Approx(none.loss).epsilon(1e-3));
    double worst = 0.0;
    for (size_t i = 0; i < o.grads.size(); ++i) {
      INFO("parameter " << i);
      const double e = rel_err(o.grads[i], none.grads[i]);
      worst = std::max(worst, e);
      CHECK(e < kGradTolerance);
    }
    WARN("recompute " << static_cast<int>(mode) << ": largest gradient difference to none " << worst);
    if (none.recorded_rows.defined()) CHECK(at::equal(o.recorded_rows, none.recorded_rows));
    CHECK(o.peak < none.peak);
    if (mode == Recompute::kActivation) activation_peak = o.peak;
    if (mode == Recompute::kCasts) {
      // No module runs twice and every recast gives the kept copy's codes: the same kernels on the
      // same values as none, so the same bits (the math attention backend is deterministic).
      CHECK(worst == 0.0);
      CHECK(o.loss == none.loss);
      // Less than activation by the weights' transposed copies at least (attention's c_proj input
      // copy is kept here: the math backend's output reaches c_proj through a copy).
      CHECK(o.peak < activation_peak);
    }
  }
}

TEST_CASE("recompute casts on CUDA: attention's saved output stands in for c_proj's columnwise input copy",
          "[model][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  // The fused attention backends (whichever the device picks for bf16) keep their output for their
  // backward; c_proj keeps its input instead of the FP8 copy while that input is a view of it
  // (the output laid out [B, T, H, D] in memory). Learned positions (the 1.3B's shape) and RoPE
  // (q and k rotated into new tensors, whose layout a backend's output may follow: measured on
  // the H200 with LibTorch 2.11, the view holds for both).
  const at::Device cuda(at::kCUDA);
  using fp8::RecipeKind;
  const RecipeKind recipe = GENERATE(RecipeKind::kDelayed, RecipeKind::kCurrent, RecipeKind::kBlock);
  const bool rope = GENERATE(false, true);
  INFO("recipe " << fp8::to_string(recipe) << ", rope " << rope);
  auto forward_peak = [&](Recompute mode) {
    ExperimentConfig cfg = small_gpu(Precision::kFp8, mode);
    cfg.fp8.kind = recipe;
    if (!rope) cfg.model.position = PositionKind::kLearned;
    step::Session session(cfg, cuda);
    session.prepare_training(nullptr);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const at::Tensor t = at::randint(512, {8, 257}, gen, at::kLong).to(cuda);
    torch::cuda::synchronize();
    release_cached_memory(cuda);
    reset_peak_memory(cuda);
    at::Tensor loss;
    {
      // As a training step runs it; every saved tensor and the FP8 weight caches are alive at the loss.
      compat::AutocastGuard autocast(at::kCUDA, session.autocast_dtype());
      loss = model::Gpt::loss(session.model().forward(t.narrow(1, 0, 256)), t.narrow(1, 1, 256));
    }
    torch::cuda::synchronize();
    const int64_t peak = peak_memory_bytes(cuda);
    loss.backward();
    torch::cuda::synchronize();
    return peak;
  };
  // One untimed pass first: the first forward and backward of a process allocate what lives on
  // (seen on an H100 with only the attention tests before this one: the first case's activation
  // peak 33.4 MB below every later case's, about LibTorch's 32 MiB cuBLAS workspace, which put
  // casts 28 MB above activation; in the full [cuda] run earlier tests had allocated it).
  forward_peak(Recompute::kActivation);
  const int64_t activation = forward_peak(Recompute::kActivation), casts = forward_peak(Recompute::kCasts);
  // 4 layers: the transposed weight copies, 256 x 3072 bytes per layer (768 KiB), and c_proj's
  // input copy [256, 2048] codes (512 KiB) each; the slack covers the small scale tensors.
  const int64_t weights = 4 * 256 * 3072, attention = 4 * 256 * 2048;
  WARN("recipe " << fp8::to_string(recipe) << (rope ? ", rope" : ", learned positions") << ": forward peak "
                 << activation << " B under activation, " << casts << " B under casts: " << activation - casts
                 << " B less (weight transposes " << weights << " B, attention's c_proj copies " << attention
                 << " B)");
  CHECK(activation - casts >= weights + attention - 64 * 1024);
}
