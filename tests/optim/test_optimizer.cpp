#include "lib/optim/optimizer.h"

#include <algorithm>  // std::max
#include <cmath>      // std::sqrt, std::pow
#include <vector>     // std::vector

#include <torch/torch.h>

#include "lib/checkpoint/checkpoint.h"
#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::optim::AdamW;
using fp8t::optim::AdamWOptions;
using fp8t::optim::NamedParameters;

namespace {

// Plain AdamW in double precision over flat vectors (the formula of optimizer.h).
struct RefParam {
  std::vector<double> p, m, v;
  bool decay;
};

void ref_step(RefParam& r, const std::vector<double>& g, int64_t t, double lr,
              const AdamWOptions& o) {
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  for (size_t i = 0; i < r.p.size(); ++i) {
    if (r.decay) r.p[i] -= lr * o.weight_decay * r.p[i];
    r.m[i] = o.beta1 * r.m[i] + (1.0 - o.beta1) * g[i];
    r.v[i] = o.beta2 * r.v[i] + (1.0 - o.beta2) * g[i] * g[i];
    const double mhat = r.m[i] / bc1;
    const double vhat = r.v[i] / bc2;
    r.p[i] -= lr * mhat / (std::sqrt(vhat) + o.eps);
  }
}

std::vector<double> to_vec(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kDouble).contiguous().cpu();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

double max_abs_diff(const at::Tensor& t, const std::vector<double>& ref) {
  const std::vector<double> v = to_vec(t);
  REQUIRE(v.size() == ref.size());
  double d = 0.0;
  for (size_t i = 0; i < v.size(); ++i) d = std::max(d, std::abs(v[i] - ref[i]));
  return d;
}

at::Tensor leaf(const at::Tensor& t) { return t.clone().set_requires_grad(true); }

AdamWOptions test_options() { return AdamWOptions{0.9, 0.95, 1e-8, 0.1}; }

}  // namespace

TEST_CASE("AdamW matches a double-precision reference over several steps", "[optim]") {
  torch::manual_seed(7);
  at::Tensor w = leaf(torch::randn({4, 3}));     // decayed
  at::Tensor e = leaf(torch::randn({2, 3, 2}));  // decayed (dim >= 2)
  at::Tensor b = leaf(torch::randn({5}));        // not decayed
  at::Tensor frozen = leaf(torch::randn({3}));   // never gets a grad
  const at::Tensor frozen0 = frozen.detach().clone();
  const AdamWOptions opt = test_options();
  AdamW adamw({{"w", w}, {"e", e}, {"b", b}, {"frozen", frozen}}, opt);
  REQUIRE(adamw.decay_names() == std::vector<std::string>{"w", "e"});
  REQUIRE(adamw.no_decay_names() == std::vector<std::string>{"b", "frozen"});

  std::vector<at::Tensor> params = {w, e, b};
  std::vector<RefParam> ref;
  for (const at::Tensor& p : params) {
    const size_t n = static_cast<size_t>(p.numel());
    ref.push_back(RefParam{to_vec(p), std::vector<double>(n), std::vector<double>(n), p.dim() >= 2});
  }
  const std::vector<double> start_w = ref[0].p;

  const int64_t steps = 6;
  for (int64_t t = 1; t <= steps; ++t) {
    const double lr = 1e-2 * static_cast<double>(t) / steps;  // varies, as a schedule would
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = torch::randn(params[i].sizes());
      params[i].mutable_grad() = g;
      ref_step(ref[i], to_vec(g), t, lr, opt);
    }
    adamw.step(lr);
    adamw.zero_grad();
  }

  // Tolerance 1e-5 (absolute; values are O(1)): the update computes in float32 (ulp(1) =
  // 1.2e-7), so each step adds a few ulps of rounding to p (decay, update) and a relative
  // ~1e-7 error to the update lr*mhat/(sqrt(vhat)+eps) (<= lr = 1e-2 in size); over 6 steps
  // that is < 2e-6. A wrong formula (bias correction, decay on the wrong group, lr off by a
  // step) moves p by >= 1e-3 here, far outside the tolerance.
  const auto state = adamw.state_dict();
  const char* names[] = {"w", "e", "b"};
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("param " << names[i]);
    REQUIRE(max_abs_diff(params[i], ref[i].p) < 1e-5);
    REQUIRE(max_abs_diff(state.at(std::string(names[i]) + ".exp_avg"), ref[i].m) < 1e-6);
    REQUIRE(max_abs_diff(state.at(std::string(names[i]) + ".exp_avg_sq"), ref[i].v) < 1e-6);
    REQUIRE(state.at(std::string(names[i]) + ".step").item<float>() == static_cast<float>(steps));
  }
  // The comparison is not vacuous: the parameters moved by far more than the tolerance.
  double moved = 0.0;
  for (size_t i = 0; i < start_w.size(); ++i) moved = std::max(moved, std::abs(ref[0].p[i] - start_w[i]));
  REQUIRE(moved > 1e-2);
  // A parameter without grad is skipped entirely.
  REQUIRE(torch::equal(frozen.detach(), frozen0));
  REQUIRE(state.at("frozen.step").item<float>() == 0.0f);
  REQUIRE(state.at("frozen.exp_avg").abs().max().item<float>() == 0.0f);
  REQUIRE(state.count("w.master") == 0);  // float32 parameters are their own master
}

TEST_CASE("AdamW decays matrices but not vectors", "[optim]") {
  // With zero gradients Adam's update is 0 / (0 + eps) = 0, leaving only the decay.
  at::Tensor w = leaf(torch::full({3, 4}, 2.0));
  at::Tensor b = leaf(torch::full({4}, 2.0));
  AdamW adamw({{"w", w}, {"b", b}}, AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  w.mutable_grad() = torch::zeros_like(w);
  b.mutable_grad() = torch::zeros_like(b);
  adamw.step(0.5);
  // 2 * (1 - 0.5 * 0.1) = 1.9; float32 rounding only (relative 1e-6).
  REQUIRE(w.min().item<float>() == Approx(1.9).epsilon(1e-6));
  REQUIRE(w.max().item<float>() == Approx(1.9).epsilon(1e-6));
  REQUIRE(torch::equal(b.detach(), torch::full({4}, 2.0)));
}

TEST_CASE("AdamW zero_grad sets grads to none or to zero", "[optim]") {
  at::Tensor w = leaf(torch::ones({2, 2}));
  AdamW adamw({{"w", w}}, test_options());
  w.mutable_grad() = torch::ones({2, 2});
  adamw.zero_grad(/*set_to_none=*/false);
  REQUIRE(w.grad().defined());
  REQUIRE(w.grad().abs().sum().item<float>() == 0.0f);
  adamw.zero_grad();
  REQUIRE_FALSE(w.grad().defined());
}

TEST_CASE("AdamW state round trip (through a checkpoint file) continues bit-exactly",
          "[optim]") {
  fp8t::test::TempDir dir("optim");
  torch::manual_seed(11);
  const at::Tensor w0 = torch::randn({8, 4});
  const at::Tensor b0 = torch::randn({4});
  std::vector<std::vector<at::Tensor>> grads;
  for (int i = 0; i < 6; ++i) grads.push_back({torch::randn({8, 4}), torch::randn({4})});
  const std::vector<double> lrs = {1e-3, 2e-3, 3e-3, 2.5e-3, 2e-3, 1e-3};

  auto run = [&](AdamW& opt, at::Tensor& w, at::Tensor& b, int from, int to) {
    for (int i = from; i < to; ++i) {
      w.mutable_grad() = grads[i][0].clone();
      b.mutable_grad() = grads[i][1].clone();
      opt.step(lrs[i]);
      opt.zero_grad();
    }
  };

  // Uninterrupted: 6 steps.
  at::Tensor wa = leaf(w0), ba = leaf(b0);
  AdamW a({{"w", wa}, {"b", ba}}, test_options());
  run(a, wa, ba, 0, 6);

  // Interrupted after 3: save params + state, restore into a fresh optimizer, 3 more.
  at::Tensor wb = leaf(w0), bb = leaf(b0);
  {
    AdamW b({{"w", wb}, {"b", bb}}, test_options());
    run(b, wb, bb, 0, 3);
    fp8t::checkpoint::Checkpoint ck;
    ck.tensors["model.w"] = wb;
    ck.tensors["model.b"] = bb;
    for (const auto& [k, v] : b.state_dict()) ck.tensors["optim." + k] = v;
    fp8t::checkpoint::save_checkpoint(dir / "ck.pt", ck);
  }
  const fp8t::checkpoint::Checkpoint ck = fp8t::checkpoint::load_checkpoint(dir / "ck.pt");
  at::Tensor wc = leaf(ck.tensors.at("model.w")), bc = leaf(ck.tensors.at("model.b"));
  AdamW c({{"w", wc}, {"b", bc}}, test_options());
  std::map<std::string, at::Tensor> state;
  for (const auto& [k, v] : ck.tensors) {
    if (k.rfind("optim.", 0) == 0) state[k.substr(6)] = v;
  }
  c.load_state_dict(state);
  run(c, wc, bc, 3, 6);

  REQUIRE(torch::equal(wa.detach(), wc.detach()));
  REQUIRE(torch::equal(ba.detach(), bc.detach()));
  const auto sa = a.state_dict();
  const auto sc = c.state_dict();
  REQUIRE(sa.size() == sc.size());
  for (const auto& [k, v] : sa) {
    INFO("state " << k);
    REQUIRE(torch::equal(v, sc.at(k)));
  }
  // And the restart mattered: a fresh optimizer without the state diverges.
  at::Tensor wd = leaf(ck.tensors.at("model.w")), bd = leaf(ck.tensors.at("model.b"));
  AdamW d({{"w", wd}, {"b", bd}}, test_options());
  run(d, wd, bd, 3, 6);
  REQUIRE_FALSE(torch::equal(wa.detach(), wd.detach()));
}

TEST_CASE("AdamW load_state_dict names missing, unexpected and mismatched keys", "[optim]") {
  at::Tensor w = leaf(torch::ones({2, 3}));
  AdamW adamw({{"w", w}}, test_options());
  auto good = adamw.state_dict();
  for (auto& [k, v] : good) v = v.clone();

  auto expect_error = [&](const std::map<std::string, at::Tensor>& s, const std::string& key) {
    try {
      adamw.load_state_dict(s);
      FAIL("no throw");
    } catch (const fp8t::Error& e) {
      REQUIRE(e.code() == fp8t::ExitCode::kBadInput);
      REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS("'" + key + "'"));
    }
  };
  auto missing = good;
  missing.erase("w.exp_avg_sq");
  expect_error(missing, "w.exp_avg_sq");
  auto extra = good;
  extra["v.exp_avg"] = torch::zeros({2});
  expect_error(extra, "v.exp_avg");
  auto wrong_shape = good;
  wrong_shape["w.exp_avg"] = torch::zeros({3, 2});
  expect_error(wrong_shape, "w.exp_avg");
  REQUIRE_NOTHROW(adamw.load_state_dict(good));
}

TEST_CASE("AdamW keeps a float32 master for bfloat16 parameters", "[optim]") {
  at::Tensor w = leaf(torch::full({4, 4}, 1.0, torch::kBFloat16));
  AdamW adamw({{"w", w}}, AdamWOptions{0.9, 0.95, 1e-8, 0.0});
  // Updates of 1e-3 are below bfloat16's resolution at 1.0 (ulp 2^-7 = 7.8e-3): only a float32
  // master accumulates them. After 5 steps the master is 1 - 5e-3 (Adam's first steps move by
  // ~lr each with a constant gradient), which rounds to 0.9961 (= 1 - 2^-8) in bfloat16.
  for (int i = 0; i < 5; ++i) {
    w.mutable_grad() = torch::ones({4, 4}, torch::kBFloat16);
    adamw.step(1e-3);
  }
  const auto state = adamw.state_dict();
  REQUIRE(state.count("w.master") == 1);
  const at::Tensor master = state.at("w.master");
  REQUIRE(master.scalar_type() == at::kFloat);
  REQUIRE(master.max().item<float>() == Approx(1.0 - 5e-3).margin(1e-6));
  REQUIRE(w.scalar_type() == at::kBFloat16);
  REQUIRE(torch::equal(w.detach(), master.to(torch::kBFloat16)));
  REQUIRE(w.max().item<float>() < 1.0f);
}

TEST_CASE("AdamW optimizes a tensor listed under two names once", "[optim]") {
  at::Tensor w = leaf(torch::ones({2, 2}));
  AdamW adamw({{"wte", w}, {"lm_head", w}}, test_options());
  const auto state = adamw.state_dict();
  REQUIRE(state.count("wte.exp_avg") == 1);
  REQUIRE(state.count("lm_head.exp_avg") == 0);
  w.mutable_grad() = torch::ones({2, 2});
  adamw.step(1e-2);
  REQUIRE(state.at("wte.step").item<float>() == 1.0f);
}

namespace {

// Two optimizers over copies of the same parameters and gradients, one stepped with a host lr,
// the other with a device tensor holding float(lr) (the CUDA graph path, lib/step/step_graph.h).
// Returns the largest difference of the weights after `steps` steps.
double host_vs_tensor_lr(const at::Device& device, double lr, int steps) {
  torch::manual_seed(17);
  const at::Tensor w0 = torch::randn({16, 8}).to(device), b0 = torch::randn({8}).to(device);
  at::Tensor w1 = leaf(w0), b1 = leaf(b0), w2 = leaf(w0), b2 = leaf(b0);
  AdamW host({{"w", w1}, {"b", b1}}, test_options());
  AdamW dev({{"w", w2}, {"b", b2}}, test_options());
  const at::Tensor lr_tensor = at::full({}, lr, at::TensorOptions().dtype(at::kFloat).device(device));
  for (int i = 0; i < steps; ++i) {
    const at::Tensor gw = torch::randn({16, 8}).to(device), gb = torch::randn({8}).to(device);
    w1.mutable_grad() = gw.clone();
    b1.mutable_grad() = gb.clone();
    w2.mutable_grad() = gw.clone();
    b2.mutable_grad() = gb.clone();
    host.step(lr);
    dev.step(lr_tensor);
  }
  return std::max((w1 - w2).abs().max().item<double>(), (b1 - b2).abs().max().item<double>());
}

}  // namespace

TEST_CASE("AdamW with a device learning rate gives the bits of the host one (an lr exact in float32)", "[optim]") {
  // The CPU kernel reads a tensor lr as double(float(lr)): equal bits for an lr float32 holds exactly.
  REQUIRE(host_vs_tensor_lr(at::Device(at::kCPU), 0.0078125, 4) == 0.0);
  at::Tensor w = leaf(torch::ones({2, 2}));
  AdamW opt({{"w", w}}, test_options());
  w.mutable_grad() = torch::ones({2, 2});
  REQUIRE_THROWS_AS(opt.step(at::full({1}, 1e-3)), fp8t::Error);  // not 0-d
  REQUIRE_THROWS_AS(opt.step(at::full({}, 1e-3, at::kDouble)), fp8t::Error);  // not float32
}

#if defined(FP8T_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>  // c10::cuda::warning_state (sync debug mode)

TEST_CASE("AdamW on CUDA: a device learning rate gives the bits of the host one", "[optim][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  // The CUDA kernel rounds a host lr to float32 as well (opmath float): 6e-4 is not exact in
  // float32, and still the weights agree bit for bit.
  REQUIRE(host_vs_tensor_lr(at::Device(at::kCUDA, 0), 6e-4, 5) == 0.0);
}

TEST_CASE("AdamW on CUDA gives the CPU loop's bits without a host sync", "[optim][cuda]") {
  if (!torch::cuda::is_available()) SKIP("needs a CUDA GPU");
  torch::manual_seed(13);
  const at::Tensor w0 = torch::randn({64, 32});
  const at::Tensor b0 = torch::randn({32});
  at::Tensor wc = leaf(w0), bc = leaf(b0);
  at::Tensor wg = leaf(w0.cuda()), bg = leaf(b0.cuda());
  AdamW cpu({{"w", wc}, {"b", bc}}, test_options());
  AdamW gpu({{"w", wg}, {"b", bg}}, test_options());
  REQUIRE(gpu.state_dict().at("w.step").is_cuda());
  for (int i = 0; i < 5; ++i) {
    const at::Tensor gw = torch::randn({64, 32});
    const at::Tensor gb = torch::randn({32});
    wc.mutable_grad() = gw;
    bc.mutable_grad() = gb;
    wg.mutable_grad() = gw.cuda();
    bg.mutable_grad() = gb.cuda();
    cpu.step(1e-2);
    // Any synchronizing call (a host read of the step count, say) throws in this mode.
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    REQUIRE_NOTHROW(gpu.step(1e-2));
    REQUIRE_THROWS(gpu.state_dict().at("w.step").item<float>());  // the mode is in force
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
  // The same IEEE operations in the same order on both devices (lib/numerics/adamw_math.h).
  REQUIRE(torch::equal(wg.detach().cpu(), wc.detach()));
  REQUIRE(torch::equal(bg.detach().cpu(), bc.detach()));
  REQUIRE(gpu.state_dict().at("w.step").item<float>() == 5.0f);
}
#endif

TEST_CASE("AdamW sharded (ZeRO-1): two ranges of a parameter give the unsharded update; decay per parameter",
          "[optim]") {
  // The same matrix and bias, optimized whole and as two ranges by two sharded optimizers (the
  // two ranks of ZeRO-1). The range [0, 5) of the bias is 1-D like a matrix range would be: the
  // decay decision must come from the parameter (matrix: decay, bias: none), not the range.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor w0 = at::randn({4, 6}, gen), b0 = at::randn({9}, gen);
  const at::Tensor gw = at::randn({4, 6}, gen), gb = at::randn({9}, gen);
  auto make = [&](at::Tensor& w, at::Tensor& b) {
    w = w0.clone().requires_grad_();
    b = b0.clone().requires_grad_();
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
  };
  at::Tensor wf, bf, w1, b1, w2, b2;
  make(wf, bf);
  make(w1, b1);
  make(w2, b2);
  AdamWOptions o;
  o.weight_decay = 0.5;  // large, so that a wrong decay decision shows
  AdamW full({{"w", wf}, {"b", bf}}, o);
  AdamW first({{"w", w1}, {"b", b1}}, o, {{"w", {0, 10}}, {"b", {0, 5}}});
  AdamW second({{"w", w2}, {"b", b2}}, o, {{"w", {10, 14}}, {"b", {5, 4}}});
  REQUIRE(first.sharded());
  REQUIRE(first.state_dict().at("w.exp_avg").numel() == 10);
  REQUIRE(second.ranges().at("b").begin == 5);
  REQUIRE(first.decay_names() == std::vector<std::string>{"w"});
  REQUIRE(first.no_decay_names() == std::vector<std::string>{"b"});
  for (int step = 0; step < 3; ++step) {
    full.step(1e-2);
    first.step(1e-2);
    second.step(1e-2);
  }
  // Elementwise the same IEEE operations on the same float32 values: the same bits.
  const at::Tensor w_sharded = at::cat({w1.detach().view(-1).narrow(0, 0, 10), w2.detach().view(-1).narrow(0, 10, 14)});
  const at::Tensor b_sharded = at::cat({b1.detach().narrow(0, 0, 5), b2.detach().narrow(0, 5, 4)});
  CHECK(at::equal(w_sharded, wf.detach().view(-1)));
  CHECK(at::equal(b_sharded, bf.detach()));
  // Elements outside a rank's ranges are untouched until the all-gather.
  CHECK(at::equal(w1.detach().view(-1).narrow(0, 10, 14), w0.view(-1).narrow(0, 10, 14)));
}
