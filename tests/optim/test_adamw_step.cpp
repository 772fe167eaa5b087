// train.moments_dtype bf16 on the CPU: lib/optim/adamw_step.cpp's loop over
// lib/numerics/adamw_math.h through optim::AdamW (the CUDA kernel is compared with this loop bit for
// bit in test_adamw_step_cuda.cpp). FP32 moments, the default, go through the same loop
// (test_optimizer.cpp).
#include "lib/optim/adamw_step.h"

#include <spdlog/sinks/ostream_sink.h>  // spdlog::sinks::ostream_sink_mt
#include <spdlog/spdlog.h>              // spdlog::default_logger
#include <torch/torch.h>

#include <c10/util/BFloat16.h>  // c10::BFloat16 (the reference's rounding)

#include <algorithm>  // std::max
#include <cmath>    // std::pow, std::sqrt, std::fabs
#include <map>      // std::map
#include <memory>   // std::make_shared
#include <sstream>  // std::ostringstream
#include <string>   // std::string
#include <vector>   // std::vector

#include "lib/numerics/adamw_math.h"         // adamw::bf16_bits
#include "lib/checkpoint/checkpoint.h"       // save_checkpoint, load_checkpoint
#include "lib/optim/optimizer.h"             // AdamW
#include "lib/checkpoint/optimizer_state.h"  // OptimizerStateLoader
#include "lib/step/session.h"                // Session (the config key reaches AdamW)
#include "lib/util/error.h"                  // fp8t::Error
#include "tests/catch.h"
#include "tests/temp_dir.h"                  // TempDir

using namespace fp8t;
using optim::AdamW;
using optim::AdamWOptions;

namespace {

AdamWOptions bf16_options(double weight_decay = 0.1) {
  AdamWOptions o{0.9, 0.95, 1e-8, weight_decay};
  o.moments_dtype = MomentsDtype::kBf16;
  return o;
}

// A few parameters of odd sizes: a decayed matrix, a decayed 3-D tensor, a bias.
struct Params {
  at::Tensor w, e, b;
  explicit Params(uint64_t seed = 3) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    w = at::randn({5, 7}, gen).requires_grad_();
    e = at::randn({2, 3, 3}, gen).requires_grad_();
    b = at::randn({11}, gen).requires_grad_();
  }
  optim::NamedParameters named() const { return {{"w", w}, {"e", e}, {"b", b}}; }
  std::vector<at::Tensor> list() const { return {w, e, b}; }
  const at::Tensor& operator[](const std::string& name) const { return name == "w" ? w : name == "e" ? e : b; }
};

// Gradients of step i (fixed seeds: every optimizer of a test sees the same).
std::vector<at::Tensor> grads_of(int i, const Params& p, double scale = 1.0) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(100 + i);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : p.list()) out.push_back(at::randn(t.sizes(), gen) * scale);
  return out;
}

void set_grads(const Params& p, const std::vector<at::Tensor>& g) {
  const std::vector<at::Tensor> ps = p.list();
  for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = g[i].clone();
}

void run_steps(AdamW& opt, const Params& p, int from, int to, double lr = 1e-2) {
  for (int i = from; i < to; ++i) {
    set_grads(p, grads_of(i, p));
    opt.step(lr * (1.0 + 0.1 * i));
    opt.zero_grad();
  }
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && at::equal(a.detach(), b.detach());
}

bool same_state(const AdamW& a, const AdamW& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (const auto& [k, v] : sa) {
    if (sb.count(k) == 0 || !same_bits(v, sb.at(k))) return false;
  }
  return true;
}

// The formula of optimizer.h in double precision with pow() bias corrections, the moments rounded
// to bf16 after each step: an implementation independent of adamw_math.h.
struct Reference {
  std::vector<double> p;
  std::vector<float> m, v;  // bf16 values
  bool decay;
  void step(const at::Tensor& grad, int64_t t, double lr, const AdamWOptions& o) {
    const at::Tensor g = grad.to(at::kDouble).contiguous();
    const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      const double gi = g.data_ptr<double>()[i];
      if (decay) p[i] -= lr * o.weight_decay * p[i];
      const double mi = o.beta1 * m[i] + (1.0 - o.beta1) * gi;
      const double vi = o.beta2 * v[i] + (1.0 - o.beta2) * gi * gi;
      p[i] -= lr / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + o.eps);
      m[i] = static_cast<float>(c10::BFloat16(static_cast<float>(mi)));
      v[i] = static_cast<float>(c10::BFloat16(static_cast<float>(vi)));
    }
  }
};

std::vector<double> doubles(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// Adds a stream sink to the default logger while it lives (what a run's log would show).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() { spdlog::default_logger()->sinks().pop_back(); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace

TEST_CASE("adamw_math: bf16 rounding is c10::BFloat16's, to nearest even, NaN stays NaN", "[optim]") {
  using train::adamw::bf16_bits;
  using train::adamw::bf16_value;
  CHECK(bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits(1.0f + 0x1p-8f) == 0x3f80);             // the tie below rounds to even (down)
  CHECK(bf16_bits(1.0f + 0x1p-7f + 0x1p-8f) == 0x3f82);   // the tie above rounds to even (up)
  CHECK(bf16_bits(3.4e38f) == 0x7f80);                    // rounds up to inf, as c10 does
  CHECK(std::isnan(bf16_value(bf16_bits(std::nanf("")))));
  CHECK(std::isnan(bf16_value(bf16_bits(-std::nanf("")))));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const at::Tensor x = at::randn({4096}, gen) * at::exp(at::randn({4096}, gen) * 10.0);
  const at::Tensor ref = x.to(at::kBFloat16);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const uint16_t want = ref.data_ptr<at::BFloat16>()[i].x;
    REQUIRE(bf16_bits(x.data_ptr<float>()[i]) == want);
  }
}

TEST_CASE("AdamW bf16 moments: the moments are bfloat16, the state keys those of fp32 moments", "[optim]") {
  Params p32, p16;
  AdamW fp32(p32.named(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  AdamW bf16(p16.named(), bf16_options());
  const auto s32 = fp32.state_dict(), s16 = bf16.state_dict();
  REQUIRE(s32.size() == s16.size());
  for (const auto& [k, v] : s32) {
    INFO(k);
    REQUIRE(s16.count(k) == 1);
    CHECK(s16.at(k).sizes() == v.sizes());
  }
  CHECK(s16.at("w.exp_avg").scalar_type() == at::kBFloat16);
  CHECK(s16.at("w.exp_avg_sq").scalar_type() == at::kBFloat16);
  CHECK(s16.at("w.step").scalar_type() == at::kFloat);
  CHECK(s16.at("w.step").dim() == 0);
  CHECK(AdamW::moments_scalar_type(MomentsDtype::kBf16) == at::kBFloat16);
  run_steps(bf16, p16, 0, 2);
  CHECK(bf16.state_dict().at("b.step").item<float>() == 2.0f);
}

TEST_CASE("AdamW bf16 moments: matches a double-precision reference; the CPU loop is deterministic", "[optim]") {
  Params p, again;
  const AdamWOptions o = bf16_options();
  AdamW opt(p.named(), o);
  AdamW opt2(again.named(), o);
  std::vector<Reference> ref;
  for (const at::Tensor& t : p.list()) {
    const auto n = static_cast<size_t>(t.numel());
    ref.push_back(Reference{doubles(t), std::vector<float>(n), std::vector<float>(n), t.dim() >= 2});
  }
  const std::vector<double> start = ref[0].p;
  const int steps = 5;
  const double lr = 1e-2;
  for (int i = 0; i < steps; ++i) {
    const std::vector<at::Tensor> g = grads_of(i, p);
    set_grads(p, g);
    set_grads(again, g);
    {
      // The loop's split over threads must not matter: 2 threads or more against 1, whatever
      // OMP_NUM_THREADS says (scripts/test.sh gives each test one core).
      const int threads = at::get_num_threads();
      at::set_num_threads(std::max(threads, 2));
      opt.step(lr);
      at::set_num_threads(1);
      opt2.step(lr);
      at::set_num_threads(threads);
    }
    for (size_t k = 0; k < ref.size(); ++k) ref[k].step(g[k], i + 1, lr, o);
  }
  REQUIRE(same_state(opt, opt2));
  for (size_t k = 0; k < ref.size(); ++k) REQUIRE(same_bits(p.list()[k], again.list()[k]));
  // Tolerances. Moments: the FP32 and the double update may round to neighbouring bf16 values:
  // one bf16 spacing, at most 2^-7 of the value (plus a floor for zeros). Weights: such a moment
  // moves one step's update (<= ~lr) by under 1%; 1% of lr per step, summed, is far below what
  // a wrong formula (decay, bias correction, eps placement) changes: each step moves w by ~lr.
  const double weight_tol = 0.01 * lr * steps;
  for (size_t k = 0; k < ref.size(); ++k) {
    INFO("parameter " << k);
    const std::vector<double> w = doubles(p.list()[k]);
    const std::string name = p.named()[k].first;
    const std::vector<double> m = doubles(opt.state_dict().at(name + ".exp_avg"));
    const std::vector<double> v = doubles(opt.state_dict().at(name + ".exp_avg_sq"));
    for (size_t i = 0; i < w.size(); ++i) {
      REQUIRE(std::fabs(w[i] - ref[k].p[i]) <= weight_tol);
      REQUIRE(std::fabs(m[i] - ref[k].m[i]) <= 0x1p-7 * std::fabs(ref[k].m[i]) + 1e-30);
      REQUIRE(std::fabs(v[i] - ref[k].v[i]) <= 0x1p-7 * std::fabs(ref[k].v[i]) + 1e-30);
    }
  }
  // The check means something: the weights moved by far more than the tolerance.
  double moved = 0.0;
  for (size_t i = 0; i < start.size(); ++i) moved = std::max(moved, std::fabs(doubles(p.w)[i] - start[i]));
  CHECK(moved > 3.0 * weight_tol);
}

TEST_CASE("AdamW bf16 moments: found_inf 1 skips the step entirely, 0 is a normal step", "[optim]") {
  Params a, b, c;
  AdamW oa(a.named(), bf16_options()), ob(b.named(), bf16_options()), oc(c.named(), bf16_options());
  run_steps(oa, a, 0, 2);
  run_steps(ob, b, 0, 2);
  run_steps(oc, c, 0, 2);
  const at::Tensor w_before = b.w.detach().clone();
  std::map<std::string, at::Tensor> before;
  for (const auto& [k, v] : ob.state_dict()) before[k] = v.clone();
  set_grads(a, grads_of(2, a));
  set_grads(b, grads_of(2, b));
  set_grads(c, grads_of(2, c));
  oa.step(1e-2);
  ob.step(1e-2, at::Tensor(), at::ones({}));
  oc.step(1e-2, at::Tensor(), at::zeros({}));
  CHECK(same_bits(b.w, w_before));
  for (const auto& [k, v] : ob.state_dict()) {
    INFO(k);
    CHECK(same_bits(v, before.at(k)));
  }
  CHECK(same_bits(a.w, c.w));
  CHECK(same_state(oa, oc));
  // The skipped step left the running products where they were: the next step is step 3.
  ob.step(1e-2);
  CHECK(same_bits(a.w, b.w));
  CHECK(same_state(oa, ob));
}

TEST_CASE("AdamW bf16 moments: grad_scale divides the gradients as they are read", "[optim]") {
  Params a, b;
  AdamW oa(a.named(), bf16_options()), ob(b.named(), bf16_options());
  for (int i = 0; i < 3; ++i) {
    set_grads(a, grads_of(i, a));
    set_grads(b, grads_of(i, b, 8.0));  // x8 and / 8: exact in float32
    oa.step(1e-2);
    ob.step(1e-2, at::full({}, 8.0f));
  }
  CHECK(same_bits(a.w, b.w));
  CHECK(same_bits(a.b, b.b));
  CHECK(same_state(oa, ob));
}

TEST_CASE("AdamW bf16 moments: a device-style lr tensor gives the bits of the host lr", "[optim]") {
  Params a, b;
  AdamW oa(a.named(), bf16_options()), ob(b.named(), bf16_options());
  for (int i = 0; i < 3; ++i) {
    set_grads(a, grads_of(i, a));
    set_grads(b, grads_of(i, b));
    oa.step(6e-4);  // not exact in float32: both round it once
    ob.step(at::full({}, static_cast<float>(6e-4)));
  }
  CHECK(same_bits(a.w, b.w));
  CHECK(same_state(oa, ob));
}

TEST_CASE("AdamW bf16 moments sharded (ZeRO-1): two ranges give the unsharded update bit for bit", "[optim]") {
  Params whole, r1, r2;
  AdamWOptions o = bf16_options(0.5);
  AdamW full(whole.named(), o);
  // Odd split points: ranges that start at any element.
  AdamW first(r1.named(), o, {{"w", {0, 13}}, {"e", {0, 7}}, {"b", {0, 3}}});
  AdamW second(r2.named(), o, {{"w", {13, 22}}, {"e", {7, 11}}, {"b", {3, 8}}});
  CHECK(first.state_dict().at("w.exp_avg").scalar_type() == at::kBFloat16);
  CHECK(first.state_dict().at("w.exp_avg").numel() == 13);
  run_steps(full, whole, 0, 3);
  run_steps(first, r1, 0, 3);
  run_steps(second, r2, 0, 3);
  for (const std::string name : {"w", "e", "b"}) {
    INFO(name);
    const at::Tensor f = whole[name].detach().view(-1);
    const at::Tensor a = r1[name].detach().view(-1), b = r2[name].detach().view(-1);
    const int64_t split = first.ranges().at(name).length;
    CHECK(at::equal(at::cat({a.narrow(0, 0, split), b.narrow(0, split, f.numel() - split)}), f));
    for (const char* moment : {".exp_avg", ".exp_avg_sq"}) {
      const at::Tensor m = at::cat({first.state_dict().at(name + moment), second.state_dict().at(name + moment)});
      CHECK(at::equal(m, full.state_dict().at(name + moment).view(-1)));
    }
  }
}

TEST_CASE("AdamW bf16 moments: a checkpoint round trip continues bit-exactly", "[optim]") {
  test::TempDir dir("optim_bf16");
  Params a, b;
  AdamW oa(a.named(), bf16_options());
  run_steps(oa, a, 0, 5);
  {
    AdamW ob(b.named(), bf16_options());
    run_steps(ob, b, 0, 3);
    checkpoint::Checkpoint ck;
    for (const auto& [name, t] : b.named()) ck.tensors["model." + name] = t;
    for (const auto& [k, v] : ob.state_dict()) ck.tensors["optim." + k] = v;
    checkpoint::save_checkpoint(dir / "ck.pt", ck);
  }
  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(dir / "ck.pt");
  CHECK(ck.tensors.at("optim.w.exp_avg").scalar_type() == at::kBFloat16);
  Params c;
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, t] : c.named()) t.copy_(ck.tensors.at("model." + name));
  }
  AdamW oc(c.named(), bf16_options());
  checkpoint::OptimizerStateLoader loader(oc, {"w", "e", "b"});
  loader.add(ck.tensors, {}, "ck.pt");
  loader.finish();
  run_steps(oc, c, 3, 5);
  CHECK(same_bits(a.w, c.w));
  CHECK(same_bits(a.e, c.e));
  CHECK(same_bits(a.b, c.b));
  CHECK(same_state(oa, oc));
}

TEST_CASE("AdamW bf16 moments: resharded onto ZeRO-1 ranges, the run continues bit-exactly", "[optim]") {
  // A whole-parameter run's state after 3 steps, loaded into two ranks' ranges (as a resume on
  // another layout does): 2 more steps on the ranges equal 2 more on the whole parameters.
  Params whole, r1, r2;
  AdamW full(whole.named(), bf16_options());
  run_steps(full, whole, 0, 3);
  std::map<std::string, at::Tensor> saved;
  for (const auto& [k, v] : full.state_dict()) saved["optim." + k] = v.clone();
  {
    at::NoGradGuard no_grad;
    for (Params* r : {&r1, &r2}) {
      for (const auto& [name, t] : r->named()) t.copy_(whole[name]);
    }
  }
  AdamW first(r1.named(), bf16_options(), {{"w", {0, 17}}, {"e", {0, 18}}, {"b", {0, 5}}});
  AdamW second(r2.named(), bf16_options(), {{"w", {17, 18}}, {"e", {18, 0}}, {"b", {5, 6}}});
  for (AdamW* opt : {&first, &second}) {
    checkpoint::OptimizerStateLoader loader(*opt, {"w", "e", "b"});
    loader.add(saved, {}, "whole.pt");
    loader.finish();
  }
  run_steps(full, whole, 3, 5);
  run_steps(first, r1, 3, 5);
  run_steps(second, r2, 3, 5);
  const at::Tensor w = at::cat({r1.w.detach().view(-1).narrow(0, 0, 17), r2.w.detach().view(-1).narrow(0, 17, 18)});
  CHECK(at::equal(w, whole.w.detach().view(-1)));
  CHECK(at::equal(r1.e, whole.e));
  CHECK(at::equal(at::cat({r1.b.detach().narrow(0, 0, 5), r2.b.detach().narrow(0, 5, 6)}), whole.b.detach()));
  CHECK(second.state_dict().at("b.step").item<float>() == 5.0f);
}

TEST_CASE("AdamW bf16 moments: resuming across moments dtypes converts, with one log line", "[optim]") {
  // fp32 -> bf16: the moments are rounded to nearest even, the step count kept, the running
  // products rebuilt: the run continues like a bf16 run holding those values.
  Params a, b;
  AdamW fp32(a.named(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  run_steps(fp32, a, 0, 3);
  AdamW bf16(b.named(), bf16_options());
  {
    LogCapture log;
    checkpoint::OptimizerStateLoader loader(bf16, {"w", "e", "b"});
    std::map<std::string, at::Tensor> tensors;
    for (const auto& [k, v] : fp32.state_dict()) tensors["optim." + k] = v;
    loader.add(tensors, {}, "fp32.pt");
    loader.finish();
    CHECK(log.text().find("the checkpoint's AdamW moments are fp32, this run's train.moments_dtype is bf16: "
                          "converted (rounded to nearest even)") != std::string::npos);
  }
  CHECK(same_bits(bf16.state_dict().at("w.exp_avg"), fp32.state_dict().at("w.exp_avg").to(at::kBFloat16)));
  CHECK(bf16.state_dict().at("w.step").item<float>() == 3.0f);
  const at::Tensor w_before = b.w.detach().clone();
  run_steps(bf16, b, 3, 4);  // continues (its beta^t rebuilt from the count: the round trip test proves them)
  CHECK(bf16.state_dict().at("w.step").item<float>() == 4.0f);
  CHECK(at::isfinite(b.w).all().item<bool>());
  CHECK_FALSE(same_bits(b.w, w_before));
  // bf16 -> fp32: widened exactly.
  Params d;
  AdamW back(d.named(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  LogCapture log;
  checkpoint::OptimizerStateLoader loader(back, {"w", "e", "b"});
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [k, v] : bf16.state_dict()) tensors["optim." + k] = v;
  loader.add(tensors, {}, "bf16.pt");
  loader.finish();
  CHECK(log.text().find("moments are bf16, this run's train.moments_dtype is fp32: converted (exactly)") !=
        std::string::npos);
  CHECK(same_bits(back.state_dict().at("w.exp_avg_sq"), bf16.state_dict().at("w.exp_avg_sq").to(at::kFloat)));
}

TEST_CASE("AdamW bf16 moments: a step count that is not a count is refused before anything changes", "[optim]") {
  Params p;
  AdamW opt(p.named(), bf16_options());
  run_steps(opt, p, 0, 1);
  std::map<std::string, at::Tensor> state;
  for (const auto& [k, v] : opt.state_dict()) state[k] = v.clone();
  state["w.step"] = at::full({}, 2.5f);
  state["e.exp_avg"] = at::ones_like(state["e.exp_avg"]);
  try {
    opt.load_state_dict(state);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK(std::string(e.what()).find("'w.step' holds 2.5, not a step count") != std::string::npos);
  }
  CHECK(opt.state_dict().at("e.exp_avg").abs().max().item<float>() < 1.0f);  // untouched
}

TEST_CASE("AdamW bf16 moments keep a float32 master for bfloat16 parameters", "[optim]") {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(4);
  at::Tensor w = at::randn({6, 5}, gen).to(at::kBFloat16).requires_grad_();
  AdamW opt({{"w", w}}, bf16_options());
  REQUIRE(opt.state_dict().at("w.master").scalar_type() == at::kFloat);
  w.mutable_grad() = at::randn({6, 5}, gen).to(at::kBFloat16);
  opt.step(1e-2);
  CHECK(same_bits(w, opt.state_dict().at("w.master").to(at::kBFloat16)));
  CHECK(opt.state_dict().at("w.step").item<float>() == 1.0f);
}

TEST_CASE("AdamW bf16 moments in a training session: the loss falls like with fp32 moments", "[optim]") {
  // A 1-layer model memorising one batch for 30 steps, once per moments dtype (Session hands
  // train.moments_dtype to AdamW). bf16 moments perturb each update by about 2^-8 of itself, so
  // the two loss curves agree closely; a broken update (no decay of v, wrong bias correction)
  // would stall or diverge.
  auto final_loss = [](MomentsDtype moments) {
    ExperimentConfig c;
    c.precision = Precision::kFp32;
    c.model.n_layer = 1;
    c.model.d_model = 32;
    c.model.n_head = 2;
    c.model.seq_len = 16;
    c.train.micro_batch_size = 4;
    c.train.moments_dtype = moments;
    step::Session session(c, at::Device(at::kCPU));
    session.prepare_training(nullptr);
    CHECK(session.optimizer().state_dict().at("wte.weight.exp_avg").scalar_type() ==
          AdamW::moments_scalar_type(moments));
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const at::Tensor t = at::randint(64, {4, 17}, gen, at::kLong);
    const data::Batch batch{t.narrow(1, 0, 16).contiguous(), t.narrow(1, 1, 16).contiguous()};
    at::Tensor loss_sum = at::zeros({});
    std::vector<double> losses;
    for (int i = 0; i < 30; ++i) {
      loss_sum.zero_();
      session.step([&] { return batch; }, 3e-3, loss_sum);
      losses.push_back(loss_sum.item<double>());
    }
    CHECK(losses.back() < 0.8 * losses.front());
    return losses.back();
  };
  const double fp32 = final_loss(MomentsDtype::kFp32), bf16 = final_loss(MomentsDtype::kBf16);
  INFO("final loss fp32 moments " << fp32 << ", bf16 moments " << bf16);
  CHECK(std::fabs(bf16 - fp32) < 0.02 * fp32);
}
