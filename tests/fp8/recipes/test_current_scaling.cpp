// lib/fp8/recipes/current_scaling.* on the CPU emulation: scales and codes against an independent float64
// reference (odd shapes, edge values), the fused producers, NoRecordScope, the non-finite rule,
// and a tiny GPT that trains under the recipe.
#include "lib/fp8/recipes/current_scaling.h"

#include <torch/torch.h>  // torch::randn, torch::optim::AdamW

#include <cfloat>  // FLT_MAX
#include <cmath>   // std::ldexp, std::nearbyint, std::floor, std::log2
#include <limits>  // std::numeric_limits

#include "lib/fp8/backends/cpu_backend.h"   // decode_codes
#include "lib/fp8/layers/fp8_activation.h"  // Fp8Gelu
#include "lib/fp8/rewrite.h"                // rewrite_to_fp8
#include "lib/model/gpt.h"                  // Gpt
#include "tests/catch.h"

using namespace fp8t;
using namespace fp8t::fp8;

namespace {

Recipe current_recipe(int margin = 0, RecipeFormat fmt = RecipeFormat::kHybrid) {
  Recipe r;
  r.kind = RecipeKind::kCurrent;
  r.margin = margin;
  r.fp8_format = fmt;
  return r;
}

struct Grid {
  int mantissa_bits;
  int min_exponent;  // of the smallest normal
  double max;
};
Grid grid_of(Format f) { return f == Format::kE4M3 ? Grid{3, -6, 448.0} : Grid{2, -14, 57344.0}; }

// Round v to the FP8 grid in float64, independently of format.h: nearest, ties to an even
// mantissa, saturating to +-max (also +-inf), NaN stays NaN, the sign of zero kept.
double fp8_round64(double v, Format f) {
  if (std::isnan(v)) return v;
  const Grid g = grid_of(f);
  const double a = std::fabs(v);
  if (a >= g.max) return std::copysign(g.max, v);
  const int e = a == 0.0 ? g.min_exponent : std::max(g.min_exponent, static_cast<int>(std::floor(std::log2(a))));
  const double quantum = std::ldexp(1.0, e - g.mantissa_bits);
  const double r = std::nearbyint(a / quantum) * quantum;  // default rounding mode: ties to even
  return std::copysign(std::min(r, g.max), v);
}

// The reference of one current-scaling cast: scale from the amax (NaN ignored) in float64,
// rounded once to float32; the product x * scale in float32 (as every cast kernel computes it);
// its FP8 value in float64.
struct Reference {
  float amax = 0.0f;
  float scale = 1.0f;
  at::Tensor values;  // float64, what the codes must decode to
};

Reference reference_cast(const at::Tensor& x, Format f, int margin) {
  Reference ref;
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const float* p = xf.data_ptr<float>();
  double amax = 0.0;
  for (int64_t i = 0; i < xf.numel(); ++i) {
    if (!std::isnan(p[i])) amax = std::max(amax, std::fabs(static_cast<double>(p[i])));
  }
  ref.amax = static_cast<float>(amax);
  const double scaled_max = grid_of(f).max / std::ldexp(1.0, margin);
  if (std::isinf(amax)) {
    ref.scale = std::numeric_limits<float>::quiet_NaN();
  } else if (amax > 0.0) {
    const double s = scaled_max / amax;  // float64, then one rounding: the float32 quotient exactly
    ref.scale = s > FLT_MAX ? FLT_MAX : static_cast<float>(s);
  }
  ref.values = at::empty(xf.sizes(), at::kDouble);
  double* out = ref.values.data_ptr<double>();
  for (int64_t i = 0; i < xf.numel(); ++i) out[i] = fp8_round64(static_cast<double>(p[i] * ref.scale), f);
  return ref;
}

bool same_double(double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); }

void require_codes_match(const Fp8Operand& op, const at::Tensor& want_values) {
  const at::Tensor got = decode_codes(op.codes, op.format).to(at::kDouble).contiguous();
  const at::Tensor want = want_values.contiguous();
  REQUIRE(got.sizes() == want.sizes());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data_ptr<double>()[i], w = want.data_ptr<double>()[i];
    if (!same_double(g, w)) {
      INFO("element " << i << ": got " << g << ", want " << w);
      REQUIRE(same_double(g, w));
    }
  }
}

struct OneSlot {
  std::shared_ptr<Scaling> scaling;
  int slot;
  OneSlot(const Recipe& r, TensorRole role) : scaling(make_scaling(r)) {
    slot = scaling->add_slot("x", role);
    scaling->finalize(at::kCPU);
  }
  Fp8Tensor cast(const at::Tensor& x, bool record = true) {
    CastOptions opt;
    opt.columnwise = true;
    opt.record = record;
    return scaling->quantize(slot, CastSource::tensor(x), opt);
  }
};

// Random values over many binades, with the edge values spread in.
at::Tensor edge_tensor(int64_t rows, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, cols}) * at::pow(2.0, at::randint(-20, 6, {rows, cols}).to(at::kFloat));
  const float edges[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 1e-30f, 448.0f, -57344.0f, 1e-7f};
  float* p = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); i += 7) p[i] = edges[(i / 7) % 8];
  return x;
}

}  // namespace

TEST_CASE("current scaling: scale and codes equal a float64 reference (odd shapes, edge values)", "[fp8]") {
  // Exact: the scale is one float32 quotient (float64 division then one rounding gives the same
  // float), the codes are the FP8 grid's nearest values of the float32 product.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {3, 5}, {17, 33}, {217, 13}, {64, 48}};
  for (const RecipeFormat fmt : {RecipeFormat::kHybrid, RecipeFormat::kE4M3}) {
    for (const int margin : {0, 3, -2}) {
      for (const TensorRole role : {TensorRole::kInput, TensorRole::kGradOutput}) {
        for (const auto& [rows, cols] : shapes) {
          CAPTURE(to_string(fmt), margin, static_cast<int>(role), rows, cols);
          OneSlot s(current_recipe(margin, fmt), role);
          const Format f = s.scaling->slot_format(s.slot);
          REQUIRE(f == (role == TensorRole::kGradOutput && fmt == RecipeFormat::kHybrid ? Format::kE5M2 : Format::kE4M3));
          const at::Tensor x = edge_tensor(rows, cols, rows * 100 + cols);
          const Reference ref = reference_cast(x, f, margin);
          const Fp8Tensor q = s.cast(x);
          REQUIRE(s.scaling->amax_history()[0][s.slot].item<float>() == ref.amax);
          REQUIRE(s.scaling->scale()[s.slot].item<float>() == ref.scale);
          REQUIRE(q.rowwise.scale_inv.item<float>() == 1.0f / ref.scale);
          require_codes_match(q.rowwise, ref.values);
          require_codes_match(q.columnwise, ref.values.t());
        }
      }
    }
  }
}

TEST_CASE("current scaling: zeros, a tiny amax, NaN elements and an infinite element", "[fp8]") {
  OneSlot s(current_recipe(), TensorRole::kInput);
  SECTION("all zeros: scale 1, zero codes") {
    s.cast(at::zeros({4, 8}));
    REQUIRE(s.scaling->scale()[0].item<float>() == 1.0f);
  }
  SECTION("a subnormal amax: the scale overflows to FLT_MAX, as delayed scaling's rule") {
    s.cast(at::full({2, 3}, 1e-40f));
    REQUIRE(s.scaling->scale()[0].item<float>() == FLT_MAX);
  }
  SECTION("NaN elements do not reach the amax and stay NaN") {
    at::Tensor x = at::ones({2, 4});
    x[0][1] = std::numeric_limits<float>::quiet_NaN();
    const Fp8Tensor q = s.cast(x);
    REQUIRE(s.scaling->amax_history()[0][0].item<float>() == 1.0f);
    REQUIRE(s.scaling->scale()[0].item<float>() == 448.0f);
    const at::Tensor v = decode_codes(q.rowwise.codes, q.rowwise.format);
    REQUIRE(std::isnan(v[0][1].item<float>()));
    REQUIRE(v[0][0].item<float>() == 448.0f);
  }
  SECTION("an infinite element makes the scale and every code NaN (the step then turns non-finite)") {
    at::Tensor x = at::ones({3, 4});
    x[2][3] = -std::numeric_limits<float>::infinity();
    const Fp8Tensor q = s.cast(x);
    REQUIRE(std::isinf(s.scaling->amax_history()[0][0].item<float>()));
    REQUIRE(std::isnan(s.scaling->scale()[0].item<float>()));
    REQUIRE(decode_codes(q.rowwise.codes, q.rowwise.format).isnan().all().item<bool>());
    REQUIRE(decode_codes(q.columnwise.codes, q.columnwise.format).isnan().all().item<bool>());
  }
}

TEST_CASE("current scaling: casts that must not record leave the state alone and give the same codes", "[fp8]") {
  OneSlot s(current_recipe(), TensorRole::kInput);
  const at::Tensor x = at::randn({16, 32});
  const Fp8Tensor recorded = s.cast(x);
  const at::Tensor amax = s.scaling->amax_history().clone(), scale = s.scaling->scale().clone();
  const at::Tensor other = at::randn({16, 32}) * 100.0;
  const Fp8Tensor eval = s.cast(other, /*record=*/false);
  Fp8Tensor again;
  {
    NoRecordScope no_record;
    REQUIRE(NoRecordScope::active());
    again = s.cast(x);
  }
  REQUIRE_FALSE(NoRecordScope::active());
  REQUIRE(at::equal(s.scaling->amax_history(), amax));
  REQUIRE(at::equal(s.scaling->scale(), scale));
  REQUIRE(at::equal(again.rowwise.codes, recorded.rowwise.codes));  // the same amax, recomputed
  REQUIRE(again.rowwise.scale_inv.item<float>() == recorded.rowwise.scale_inv.item<float>());
  REQUIRE(eval.rowwise.scale_inv.item<float>() != recorded.rowwise.scale_inv.item<float>());  // its own amax
}

TEST_CASE("delayed scaling under NoRecordScope: the history is not recorded, the scales are those in effect",
          "[fp8]") {
  auto scaling = make_scaling(Recipe{});
  const int slot = scaling->add_slot("x", TensorRole::kInput);
  scaling->finalize(at::kCPU);
  CastOptions opt;
  scaling->quantize(slot, CastSource::tensor(at::full({2, 2}, 3.0f)), opt);
  scaling->update();  // scale = 448 / 3
  const at::Tensor history = scaling->amax_history().clone();
  Fp8Tensor q;
  {
    NoRecordScope no_record;
    q = scaling->quantize(slot, CastSource::tensor(at::full({2, 2}, 100.0f)), opt);
  }
  REQUIRE(at::equal(scaling->amax_history(), history));
  REQUIRE(q.rowwise.scale_inv.item<float>() == 1.0f / (448.0f / 3.0f));
}

namespace {

ModelSection tiny_model() {
  ModelSection m;
  m.vocab_size = 64;
  m.seq_len = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  return m;
}

}  // namespace

TEST_CASE("current scaling: the fused norm and GELU casts equal casting their high-precision outputs (CPU)",
          "[fp8]") {
  // The same model twice; in `plain` the GELUs are the model's own, so their Linears cast GELU's
  // output and gradient themselves. Under current scaling every cast recomputes its amax, so
  // the two must agree bit for bit in losses and gradients.
  auto build = [](bool fused) {
    torch::manual_seed(31);
    auto gpt = std::make_shared<model::Gpt>(tiny_model());
    auto rw = rewrite_to_fp8(*gpt, current_recipe(), at::kCPU);
    REQUIRE(rw.scaling->kind() == RecipeKind::kCurrent);
    REQUIRE(rw.report.converted_norms == 4);
    if (!fused) {
      for (auto& b : gpt->blocks) {
        b->mlp->replace_slot("act", std::make_shared<model::Activation>(model::Activation::Kind::kGeluTanh));
      }
    }
    return std::make_pair(gpt, rw);
  };
  auto [fused, fused_rw] = build(true);
  auto [plain, plain_rw] = build(false);
  REQUIRE(std::dynamic_pointer_cast<Fp8Gelu>(fused->blocks[0]->dense_mlp()->act) != nullptr);
  torch::manual_seed(4);
  for (int step = 0; step < 2; ++step) {
    const at::Tensor idx = torch::randint(0, 64, {3, 17});
    at::Tensor losses[2];
    int i = 0;
    for (model::Gpt* g : {fused.get(), plain.get()}) {
      g->zero_grad();
      losses[i] = model::Gpt::loss(g->forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
      losses[i++].backward();
    }
    REQUIRE(losses[0].item<float>() == losses[1].item<float>());
    REQUIRE(at::equal(fused_rw.scaling->scale(), plain_rw.scaling->scale()));
    const auto plain_params = plain->named_parameters();
    for (const auto& p : fused->named_parameters()) {
      INFO(p.key());
      const at::Tensor g = p.value().grad(), want = plain_params[p.key()].grad();
      REQUIRE(g.defined() == want.defined());
      if (g.defined()) REQUIRE(at::equal(g, want));
    }
  }
}

TEST_CASE("current scaling: a tiny GPT trains (the loss drops), every slot gets a finite scale", "[fp8]") {
  torch::manual_seed(5);
  auto gpt = std::make_shared<model::Gpt>(tiny_model());
  auto result = rewrite_to_fp8(*gpt, current_recipe(), at::kCPU);
  REQUIRE(result.report.to_string().find("FP8 recipe: current") != std::string::npos);
  torch::optim::AdamW opt(gpt->parameters(), torch::optim::AdamWOptions(3e-3));
  const at::Tensor idx = torch::randint(0, 64, {4, 17});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    const at::Tensor loss = model::Gpt::loss(gpt->forward(idx.narrow(1, 0, 16)), idx.narrow(1, 1, 16));
    loss.backward();
    result.scaling->end_micro_batch(/*last_of_step=*/true);
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  // Memorising one batch: the same bar as delayed scaling's test (tests/fp8/test_rewrite.cpp).
  REQUIRE(std::isfinite(last));
  REQUIRE(last < 0.7 * first);
  REQUIRE(result.scaling->weight_epoch() == 30);
  REQUIRE(at::isfinite(result.scaling->scale()).all().item<bool>());
  REQUIRE(result.scaling->scale().ne(1.0).all().item<bool>());  // every slot was cast with its own scale
}
