// lib/model/attention_backend.*: train.attention_backend's order of ATen's SDPA backends, and on a
// GPU the cudnn backend against flash for the attention of fp8train's LLaMA shapes.
#include "lib/model/attention_backend.h"

#include <ATen/Context.h>     // at::globalContext
#include <ATen/SDPBackend.h>  // at::SDPBackend

#include "tests/catch.h"

using namespace fp8t;

namespace {

int64_t id(at::SDPBackend b) { return static_cast<int64_t>(b); }

}  // namespace

TEST_CASE("attention backend: the chosen backend first, the rest in LibTorch's default order", "[model]") {
  const std::vector<int64_t> flash_first = {id(at::SDPBackend::flash_attention), id(at::SDPBackend::efficient_attention),
                                            id(at::SDPBackend::math), id(at::SDPBackend::cudnn_attention),
                                            id(at::SDPBackend::overrideable)};
  CHECK(model::attention_priority_order(AttentionBackend::kFlash) == flash_first);
  const std::vector<int64_t> cudnn_first = {id(at::SDPBackend::cudnn_attention), id(at::SDPBackend::flash_attention),
                                            id(at::SDPBackend::efficient_attention), id(at::SDPBackend::math),
                                            id(at::SDPBackend::overrideable)};
  CHECK(model::attention_priority_order(AttentionBackend::kCudnn) == cudnn_first);
  const std::vector<int64_t> math_first = {id(at::SDPBackend::math), id(at::SDPBackend::flash_attention),
                                           id(at::SDPBackend::efficient_attention), id(at::SDPBackend::cudnn_attention),
                                           id(at::SDPBackend::overrideable)};
  CHECK(model::attention_priority_order(AttentionBackend::kMath) == math_first);
}

TEST_CASE("attention backend: the CPU resolves to math and its order is left alone", "[model]") {
  const auto before = at::globalContext().sDPPriorityOrder();
  const at::Device cpu(at::kCPU);
  CHECK(model::resolve_attention_backend(AttentionBackend::kCudnn, cpu, 1024, true).backend == AttentionBackend::kMath);
  const model::AttentionChoice s = model::select_attention_backend(AttentionBackend::kCudnn, cpu, 64, true);
  CHECK(s.backend == AttentionBackend::kMath);
  CHECK(std::string(model::attention_backend_name(s.backend)) == "math");
  CHECK(s.replaced.empty());
  CHECK(at::globalContext().sDPPriorityOrder() == before);
}

TEST_CASE("attention backend: cudnn only at sequence lengths a CUDA graph can replay it at", "[model]") {
  using B = AttentionBackend;
  // auto: cudnn on Hopper at whole multiples of 128, flash elsewhere and below compute capability 9.
  CHECK(model::choose_attention_backend(B::kAuto, 9, 1024, true).backend == B::kCudnn);
  CHECK(model::choose_attention_backend(B::kAuto, 9, 8192, false).backend == B::kCudnn);
  CHECK(model::choose_attention_backend(B::kAuto, 10, 128, true).backend == B::kCudnn);
  CHECK(model::choose_attention_backend(B::kAuto, 8, 1024, true).backend == B::kFlash);
  for (int64_t t : {32, 64, 96, 127, 160, 192, 200}) {
    INFO("seq_len " << t);
    const model::AttentionChoice a = model::choose_attention_backend(B::kAuto, 9, t, true);
    CHECK(a.backend == B::kFlash);
    CHECK(a.replaced.empty());  // auto chose; nothing the user asked for was replaced
    // An explicit cudnn: replaced, with the reason, where a graph replays it; kept eagerly.
    const model::AttentionChoice c = model::choose_attention_backend(B::kCudnn, 9, t, true);
    CHECK(c.backend == B::kFlash);
    CHECK_THAT(c.replaced, FP8T_CONTAINS("train.attention_backend cudnn") &&
                               FP8T_CONTAINS("model.seq_len " + std::to_string(t)) &&
                               FP8T_CONTAINS("train.cuda_graphs=false"));
    CHECK(model::choose_attention_backend(B::kCudnn, 9, t, false).backend == B::kCudnn);
  }
  CHECK(model::choose_attention_backend(B::kCudnn, 9, 256, true).backend == B::kCudnn);
  CHECK(model::choose_attention_backend(B::kCudnn, 9, 256, true).replaced.empty());
  // The other explicit backends are kept as asked.
  CHECK(model::choose_attention_backend(B::kFlash, 9, 64, true).backend == B::kFlash);
  CHECK(model::choose_attention_backend(B::kEfficient, 9, 64, true).backend == B::kEfficient);
  CHECK(model::choose_attention_backend(B::kMath, 9, 64, true).backend == B::kMath);
}

TEST_CASE("attention backend: cudnn against flash, forward and backward (bf16, GQA, causal)", "[model][cuda]") {
  if (!torch::cuda::is_available()) SKIP("no CUDA device");
  const auto before = at::globalContext().sDPPriorityOrder();
  const at::Device dev(at::kCUDA, 0);
  // LLaMA-3B's attention (24 query heads, 8 K/V heads of 128) at a short sequence.
  const auto opts = at::TensorOptions().device(dev).dtype(at::kBFloat16);
  torch::manual_seed(0);
  const at::Tensor q0 = at::randn({2, 24, 1024, 128}, opts), k0 = at::randn({2, 8, 1024, 128}, opts);
  const at::Tensor v0 = at::randn({2, 8, 1024, 128}, opts), dy = at::randn({2, 24, 1024, 128}, opts);
  auto run = [&](AttentionBackend b) {
    model::select_attention_backend(b, dev, 1024, /*cuda_graphs=*/false);
    at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    const at::Tensor y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, true);
    y.backward(dy);
    return std::vector<at::Tensor>{y.detach().to(at::kFloat), q.grad().to(at::kFloat), k.grad().to(at::kFloat),
                                   v.grad().to(at::kFloat)};
  };
  const auto flash = run(AttentionBackend::kFlash);
  const auto cudnn = run(AttentionBackend::kCudnn);
  std::vector<int64_t> restore;
  for (at::SDPBackend b : before) restore.push_back(static_cast<int64_t>(b));
  at::globalContext().setSDPPriorityOrder(restore);
  // Both accumulate in FP32 and round to bf16 once, in different orders. scripts/attention_bench.py
  // on an H100 (torch 2.11, cuDNN 9.19) saw the largest |cudnn - flash| of the output and the three
  // gradients at 4.3e-3 to 6.0e-3 of the tensor's largest magnitude over the LLaMA 1B/3B/8B shapes;
  // allowed: 2^-7 = 7.8e-3 (two bf16 roundings of the largest element).
  for (size_t i = 0; i < flash.size(); ++i) {
    const double scale = flash[i].abs().max().item<double>();
    const double diff = (cudnn[i] - flash[i]).abs().max().item<double>();
    INFO("tensor " << i << " (y, dq, dk, dv): max |cudnn - flash| " << diff << ", max |flash| " << scale);
    CHECK(diff <= scale / 128.0);
  }
}
