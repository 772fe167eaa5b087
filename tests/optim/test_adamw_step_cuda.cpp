// AdamW on a GPU, FP32 and bf16 moments (train.moments_dtype): kernels/adamw.cu (through
// lib/optim/adamw_step_cuda.cpp) gives the CPU loop's bits (both are lib/numerics/adamw_math.h), over
// many tensors of odd sizes and alignments, with a device lr, grad_scale and found_inf; AdamW's
// step without a host sync and replayed from a CUDA graph; and the kernel's bandwidth at the 1.3B
// model's size against LibTorch's fused AdamW.
#if defined(FP8T_WITH_CUDA)

#include <ATen/cuda/CUDAContext.h>   // at::cuda::getCurrentCUDAStream, getStreamFromPool
#include <ATen/cuda/CUDAGraph.h>     // at::cuda::CUDAGraph
#include <c10/cuda/CUDAFunctions.h>  // c10::cuda::warning_state, device_synchronize
#include <c10/cuda/CUDAGuard.h>      // c10::cuda::CUDAStreamGuard

#include <algorithm>   // std::sort
#include <cstdio>      // std::printf
#include <functional>  // std::function
#include <string>      // std::string
#include <vector>      // std::vector

#include "fp8t_optimizer_kernels.h"        // fp8t_adamw_*_moments, fp8t_last_precondition
#include "lib/optim/optimizer.h"           // AdamW
#include "lib/optim/adamw_step.h"          // adamw_multi_tensor_step, AdamWBatch
#include "lib/util/error.h"                // fp8t::Error
#include "tests/catch.h"
#include "tests/kernels/cuda_test_util.h"  // FP8T_REQUIRE_GPU, on_cuda, reporting, skip_large
#include "tests/kernels/cuda_timing.h"     // median_event_ms

using namespace fp8t;
using namespace fp8t::test;
using optim::AdamW;
using optim::AdamWOptions;
using optim::AdamWBatch;
using optim::AdamWStepArgs;

namespace {

// Element counts that reach every path: below one vector, vector + tail, exactly a block's chunk
// (4096), a chunk and one, several chunks; more tensors than one launch holds (48).
std::vector<int64_t> odd_sizes() {
  std::vector<int64_t> n = {1, 3, 4, 5, 7, 17, 255, 1023, 4095, 4096, 4097, 10001, 3 * 4096 + 9};
  for (int i = 0; n.size() < 61; ++i) n.push_back(1 + (i * 37) % 300);
  return n;
}

// The tensors of a batch laid out in one flat buffer each, starting at `offsets` (an offset not a
// multiple of 4 elements makes that tensor's arrays unaligned for vectors: the kernel's scalar
// path, as for a ZeRO-1 range that starts anywhere).
struct Flat {
  at::Tensor p, g, m, v;
  std::vector<at::Tensor> states;
  AdamWBatch batch;
};

Flat make_flat(const std::vector<int64_t>& sizes, const at::Device& device, uint64_t seed,
               at::ScalarType moments = at::kBFloat16) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    total += (i % 5 == 3) ? 1 : 0;  // every fifth tensor starts one element later (unaligned)
    offsets.push_back(total);
    total += (sizes[i] + 3) / 4 * 4;
  }
  Flat f;
  f.p = at::randn({total}, gen).to(device);
  f.g = at::zeros({total}, at::TensorOptions().device(device));
  f.m = at::zeros({total}, at::TensorOptions().dtype(moments).device(device));
  f.v = at::zeros_like(f.m);
  for (size_t i = 0; i < sizes.size(); ++i) {
    f.batch.params.push_back(f.p.narrow(0, offsets[i], sizes[i]));
    f.batch.grads.push_back(f.g.narrow(0, offsets[i], sizes[i]));
    f.batch.exp_avgs.push_back(f.m.narrow(0, offsets[i], sizes[i]));
    f.batch.exp_avg_sqs.push_back(f.v.narrow(0, offsets[i], sizes[i]));
    f.states.push_back(at::tensor({0.0f, 1.0f, 1.0f}).to(device));
    f.batch.states.push_back(f.states.back());
  }
  return f;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) { return at::equal(a.cpu(), b.cpu()); }

// Gradients of step `step` (wide magnitudes: zeros, tiny and large values), the same on both devices.
at::Tensor grads_of(int step, int64_t n) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(50 + step);
  at::Tensor g = at::randn({n}, gen) * at::exp(at::randn({n}, gen) * 3.0);
  g.index_put_({at::randint(n, {n / 50 + 1}, gen)}, 0.0f);
  return g;
}

// Median milliseconds of `run` over 10 event pairs after 2 warm-ups.
double median_ms(const std::function<void()>& run) { return test::median_event_ms(2, 10, run); }

AdamWOptions options_for(MomentsDtype moments) {
  AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  o.moments_dtype = moments;
  return o;
}

}  // namespace

// [kernels]: scripts/device-test.sh runs these two under compute-sanitizer.
TEST_CASE("adamw kernel, fp32 and bf16 moments: the CPU loop's bits over 61 tensors, tails, unaligned ranges",
          "[optim][kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  const std::vector<int64_t> sizes = odd_sizes();
  const at::ScalarType moments = GENERATE(at::kFloat, at::kBFloat16);
  CAPTURE(moments);
  Flat cpu = make_flat(sizes, at::kCPU, 1, moments);
  Flat gpu = make_flat(sizes, at::kCUDA, 1, moments);
  REQUIRE(same_bits(cpu.p, gpu.p));
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    const at::Tensor g = grads_of(step, cpu.g.numel());
    cpu.g.copy_(g);
    gpu.g.copy_(g);
    AdamWStepArgs a;
    a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f;
    a.weight_decay = step % 2 == 0 ? 0.1f : 0.0f;  // both groups' kind of launch
    const float lr = 1e-2f * static_cast<float>(step + 1) / 3.0f;
    const float scale = step == 1 ? 2.5f : 1.0f;        // a divisor that rounds
    const float inf = step == 3 ? 1.0f : 0.0f;          // step 3 is skipped
    AdamWStepArgs c = a, d = a;
    c.lr = at::full({}, lr), c.grad_scale = at::full({}, scale), c.found_inf = at::full({}, inf);
    d.lr = c.lr.cuda(), d.grad_scale = c.grad_scale.cuda(), d.found_inf = c.found_inf.cuda();
    if (step == 4) {  // host lr, no scale, no found_inf
      c = a, d = a;
      c.lr_value = d.lr_value = lr;
    }
    optim::adamw_multi_tensor_step(cpu.batch, c);
    optim::adamw_multi_tensor_step(gpu.batch, d);
    REQUIRE(same_bits(cpu.p, gpu.p));
    REQUIRE(same_bits(cpu.m, gpu.m));
    REQUIRE(same_bits(cpu.v, gpu.v));
    for (size_t i = 0; i < sizes.size(); ++i) REQUIRE(same_bits(cpu.states[i], gpu.states[i]));
  }
  CHECK(cpu.states[0][0].item<float>() == 4.0f);  // 5 steps, one skipped
  CHECK(gpu.states[60][0].item<float>() == 4.0f);  // the last tensor (second launch)
}

TEST_CASE("adamw kernel: a batch whose moments do not match its parameters is refused, naming the index",
          "[optim][kernels][cuda]") {
  FP8T_REQUIRE_GPU();
  Flat gpu = make_flat({8}, at::kCUDA, 2);
  gpu.batch.exp_avgs[0] = gpu.m.narrow(0, 0, 4);  // 4 moments for 8 parameters
  try {
    optim::adamw_multi_tensor_step(gpu.batch, AdamWStepArgs{});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("moments of parameter 0") != std::string::npos);
  }
  // The launcher itself refuses a moment pointer that is not bf16-aligned, and says which check.
  float* p = gpu.p.data_ptr<float>();
  const float* g = gpu.g.data_ptr<float>();
  auto* odd = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(gpu.m.data_ptr()) + 1);
  float* state = gpu.states[0].data_ptr<float>();
  const int64_t n = 8;
  REQUIRE(fp8t_adamw_bf16_moments(1, &p, &g, &odd, &odd, &state, &n, nullptr, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                                  nullptr, nullptr, at::cuda::getCurrentCUDAStream().stream()) ==
          cudaErrorInvalidValue);
  CHECK(std::string(fp8t_last_precondition()).find("fp8t_adamw_bf16_moments: a parameter, gradient or moment not "
                                                   "aligned to its element size") != std::string::npos);
  // The same for float32 moments, misaligned by 2 bytes.
  auto* odd_f = reinterpret_cast<float*>(reinterpret_cast<char*>(gpu.m.data_ptr()) + 2);
  REQUIRE(fp8t_adamw_fp32_moments(1, &p, &g, &odd_f, &odd_f, &state, &n, nullptr, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                                  nullptr, nullptr, at::cuda::getCurrentCUDAStream().stream()) ==
          cudaErrorInvalidValue);
  CHECK(std::string(fp8t_last_precondition()).find("fp8t_adamw_fp32_moments: a parameter, gradient or moment not "
                                                   "aligned to its element size") != std::string::npos);
  CHECK(gpu.states[0][0].item<float>() == 0.0f);  // nothing was launched
}

TEST_CASE("AdamW on CUDA, fp32 and bf16 moments: the CPU optimizer's bits, sharded too, without a host sync",
          "[optim][cuda]") {
  FP8T_REQUIRE_GPU();
  const MomentsDtype moments = GENERATE(MomentsDtype::kFp32, MomentsDtype::kBf16);
  CAPTURE(static_cast<int>(moments));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor w0 = at::randn({37, 29}, gen), b0 = at::randn({29}, gen);
  at::Tensor wc = w0.clone().requires_grad_(), bc = b0.clone().requires_grad_();
  at::Tensor wg = w0.cuda().requires_grad_(), bg = b0.cuda().requires_grad_();
  at::Tensor ws = w0.cuda().requires_grad_(), bs = b0.cuda().requires_grad_();
  AdamW cpu({{"w", wc}, {"b", bc}}, options_for(moments));
  AdamW gpu({{"w", wg}, {"b", bg}}, options_for(moments));
  AdamW shard({{"w", ws}, {"b", bs}}, options_for(moments), {{"w", {101, 555}}, {"b", {3, 17}}});  // unaligned ranges
  for (int i = 0; i < 4; ++i) {
    const at::Tensor gw = at::randn({37, 29}, gen), gb = at::randn({29}, gen);
    wc.mutable_grad() = gw, bc.mutable_grad() = gb;
    wg.mutable_grad() = gw.cuda(), bg.mutable_grad() = gb.cuda();
    ws.mutable_grad() = gw.cuda(), bs.mutable_grad() = gb.cuda();
    const at::Tensor lr = at::full({}, 3e-3f), scale = at::full({}, 1.5f), inf = at::full({}, i == 2 ? 1.0f : 0.0f);
    const at::Tensor lr_g = lr.cuda(), scale_g = scale.cuda(), inf_g = inf.cuda();
    cpu.step(lr, scale, inf);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    REQUIRE_NOTHROW(gpu.step(lr_g, scale_g, inf_g));
    REQUIRE_NOTHROW(shard.step(lr_g, scale_g, inf_g));
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
  CHECK(same_bits(wc, wg));
  CHECK(same_bits(bc, bg));
  for (const auto& [k, v] : cpu.state_dict()) {
    INFO(k);
    CHECK(same_bits(v, gpu.state_dict().at(k)));
  }
  CHECK(same_bits(wc.detach().view(-1).narrow(0, 101, 555), ws.detach().view(-1).narrow(0, 101, 555)));
  CHECK(same_bits(bc.detach().narrow(0, 3, 17), bs.detach().narrow(0, 3, 17)));
  CHECK(same_bits(cpu.state_dict().at("w.exp_avg_sq").view(-1).narrow(0, 101, 555),
                  shard.state_dict().at("w.exp_avg_sq")));
  CHECK(gpu.state_dict().at("w.step").item<float>() == 3.0f);
}

TEST_CASE("AdamW on CUDA, fp32 and bf16 moments: a step captured in a CUDA graph replays the eager steps' bits",
          "[optim][cuda]") {
  FP8T_REQUIRE_GPU();
  const MomentsDtype moments = GENERATE(MomentsDtype::kFp32, MomentsDtype::kBf16);
  CAPTURE(static_cast<int>(moments));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(8);
  const at::Tensor w0 = at::randn({130, 67}, gen), b0 = at::randn({67}, gen);
  at::Tensor we = w0.cuda().requires_grad_(), be = b0.cuda().requires_grad_();
  at::Tensor wr = w0.cuda().requires_grad_(), br = b0.cuda().requires_grad_();
  AdamW eager({{"w", we}, {"b", be}}, options_for(moments));
  AdamW graphed({{"w", wr}, {"b", br}}, options_for(moments));
  // Static inputs of the graph: gradients kept in place (zero_grad(false)), lr, scale, found_inf.
  wr.mutable_grad() = at::zeros_like(wr), br.mutable_grad() = at::zeros_like(br);
  const at::TensorOptions f = on_cuda(at::kFloat);
  at::Tensor lr = at::zeros({}, f), scale = at::ones({}, f), inf = at::zeros({}, f);
  auto set_inputs = [&](int i) {
    const at::Tensor gw = at::randn({130, 67}, gen).cuda(), gb = at::randn({67}, gen).cuda();
    we.mutable_grad() = gw.clone(), be.mutable_grad() = gb.clone();
    wr.mutable_grad().copy_(gw), br.mutable_grad().copy_(gb);
    lr.fill_(1e-3 * (i + 1));
    scale.fill_(i == 2 ? 3.0 : 1.0);
    inf.fill_(i == 3 ? 1.0 : 0.0);
  };
  set_inputs(0);
  eager.step(lr, scale, inf);
  graphed.step(lr, scale, inf);  // eager warm-up before the capture
  c10::cuda::device_synchronize();
  at::cuda::CUDAGraph graph;
  {
    const at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
    const c10::cuda::CUDAStreamGuard guard(side);
    graph.capture_begin();
    graphed.step(lr, scale, inf);  // recorded, not run
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  CHECK(same_bits(we, wr));  // the capture itself changed nothing
  for (int i = 1; i < 6; ++i) {
    CAPTURE(i);
    set_inputs(i);
    eager.step(lr, scale, inf);
    graph.replay();
    REQUIRE(same_bits(we, wr));
    REQUIRE(same_bits(be, br));
    for (const auto& [k, v] : eager.state_dict()) REQUIRE(same_bits(v, graphed.state_dict().at(k)));
  }
  CHECK(graphed.state_dict().at("b.step").item<float>() == 5.0f);  // 6 steps, one skipped
}

TEST_CASE("adamw timing: 1.3B parameters in 150 tensors, fp8train's kernel (fp32 and bf16 moments) against "
          "LibTorch's fused AdamW (runs with FP8T_TEST_REPORT)", "[optim][cuda][timing]") {
  FP8T_REQUIRE_GPU();
  if (!reporting()) SKIP("a timing case: it runs with FP8T_TEST_REPORT=1");
  if (skip_large(int64_t{1} << 30)) SKIP("too large under compute-sanitizer (FP8T_TEST_SMALL)");
  constexpr int kTensors = 150;
  constexpr int64_t kParams = 1'300'000'000;
  std::vector<int64_t> sizes;
  for (int i = 0; i < kTensors; ++i) sizes.push_back(kParams / kTensors + (i % 3) * 1000 + (i % 2));
  double n = 0;
  for (int64_t s : sizes) n += static_cast<double>(s);
  const at::TensorOptions f = on_cuda(at::kFloat);
  // fp8train's kernel with `moments` moments; the tensors are freed before the next measurement.
  auto kernel_ms = [&](at::ScalarType moments) {
    AdamWBatch b;
    for (int64_t s : sizes) {
      b.params.push_back(at::randn({s}, f));
      b.grads.push_back(at::randn({s}, f));
      b.exp_avgs.push_back(at::zeros({s}, on_cuda(moments)));
      b.exp_avg_sqs.push_back(at::zeros({s}, on_cuda(moments)));
      b.states.push_back(at::tensor({0.0f, 1.0f, 1.0f}).cuda());
    }
    AdamWStepArgs a;
    a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f;
    a.lr = at::full({}, 1e-4f, f);
    a.grad_scale = at::ones({}, f);
    a.found_inf = at::zeros({}, f);
    return median_ms([&] { optim::adamw_multi_tensor_step(b, a); });
  };
  const double bf16_ms = kernel_ms(at::kBFloat16), fp32_ms = kernel_ms(at::kFloat);
  double fused_ms = 0;
  {
    std::vector<at::Tensor> p, g, m, v, steps;
    for (int64_t s : sizes) {
      p.push_back(at::randn({s}, f));
      g.push_back(at::randn({s}, f));
      m.push_back(at::zeros({s}, f));
      v.push_back(at::zeros({s}, f));
      steps.push_back(at::zeros({}, f));
    }
    const at::Tensor lr = at::full({}, 1e-4f, f), scale = at::ones({}, f), inf = at::zeros({}, f);
    fused_ms = median_ms([&] {
      at::_fused_adamw_(p, g, m, v, {}, steps, lr, 0.9, 0.95, 0.1, 1e-8, false, false, scale, inf);
    });
  }
  // Bytes moved per parameter: bf16 moments 20 (p, g read, p written: 12; m, v read and
  // written: 8); fp32 moments 28 (m, v read and written: 16).
  auto gbs = [&](double bytes, double ms) { return bytes * n / (ms * 1e-3) / 1e9; };
  std::printf("AdamW %.3g parameters in %d tensors: fp8train kernel fp32 moments %.3f ms, %.0f GB/s; bf16 moments "
              "%.3f ms, %.0f GB/s; at::_fused_adamw_ fp32 moments %.3f ms, %.0f GB/s; fp32 time ratio "
              "(fp8train / fused) %.2f\n",
              n, kTensors, fp32_ms, gbs(28.0, fp32_ms), bf16_ms, gbs(20.0, bf16_ms), fused_ms, gbs(28.0, fused_ms),
              fp32_ms / fused_ms);
  // A robust floor only (a serialised or broken launch lands far below); an H200 moves ~4 TB/s.
  CHECK(gbs(20.0, bf16_ms) > 1500.0);
  CHECK(gbs(28.0, fp32_ms) > 1500.0);
  CHECK(fp32_ms < fused_ms);  // the reason the fp32 path runs on this kernel
  CHECK(bf16_ms < fp32_ms);
}

#endif  // FP8T_WITH_CUDA
