// lib/model/moe_router.*: top-k routing, the dispatch plan's padded groups, dispatch and combine.
#include "lib/model/moe_router.h"

#include <torch/torch.h>  // torch::manual_seed, torch::randn

#include <set>     // std::set
#include <vector>  // std::vector

#include "lib/model/layers.h"  // kGroupRowAlign
#include "tests/catch.h"

using namespace fp8t;

namespace {

MoeSection moe_of(int64_t experts, int64_t k) {
  MoeSection m;
  m.experts = experts;
  m.top_k = k;
  return m;
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

TEST_CASE("moe router: padded rows leave room for every expert's padding", "[model]") {
  // 37 pairs round up to 48; 5 experts each get at most 15 rows of padding or one 16-row block.
  CHECK(model::padded_rows(37, 5) == 48 + 16 * 5);
  CHECK(model::padded_rows(64, 1) == 64 + 16);
}

TEST_CASE("moe router: the plan puts each expert's pairs in token order in its aligned group", "[model]") {
  // 6 tokens, top-2 over 4 experts; expert 3 gets nothing.
  const at::Tensor experts = torch::tensor({0, 1, 1, 2, 0, 2, 1, 0, 2, 1, 0, 1}, at::kLong).view({6, 2});
  const at::Tensor counts = torch::tensor({4.0f, 5.0f, 3.0f, 0.0f});
  const model::DispatchPlan p = model::plan_dispatch(experts, counts, 4);
  REQUIRE(p.rows == model::padded_rows(12, 4));  // 16 + 64
  const std::vector<int64_t> ends = to_vector(p.offsets);
  // Groups of 16 each (the counts round up to one block); the last runs to the buffer's end.
  CHECK(ends == std::vector<int64_t>({16, 32, 48, p.rows}));
  const std::vector<int64_t> rows = to_vector(p.rows_of);
  // Expert 0's pairs in pair order (0, 4, 7, 10) take rows 0..3; expert 1's (1, 2, 6, 9, 11) 16..20.
  CHECK(rows[0] == 0);
  CHECK(rows[4] == 1);
  CHECK(rows[7] == 2);
  CHECK(rows[10] == 3);
  CHECK(rows[1] == 16);
  CHECK(rows[2] == 17);
  CHECK(rows[6] == 18);
  CHECK(rows[9] == 19);
  CHECK(rows[11] == 20);
  CHECK(rows[3] == 32);
  CHECK(std::set<int64_t>(rows.begin(), rows.end()).size() == rows.size());
}

TEST_CASE("moe router: groups are multiples of the alignment, at least one block each", "[model]") {
  torch::manual_seed(3);
  const int64_t E = 7, T = 53, k = 3;
  const at::Tensor experts = torch::randint(0, E - 2, {T, k}, at::kLong);  // the last two experts get nothing
  const at::Tensor counts = at::zeros({E}).index_add_(0, experts.view(-1), at::ones({T * k}));
  const model::DispatchPlan p = model::plan_dispatch(experts, counts, E);
  const std::vector<int64_t> ends = to_vector(p.offsets);
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t size = ends[e] - start;
    CHECK(size % model::kGroupRowAlign == 0);
    CHECK(size >= model::kGroupRowAlign);
    CHECK(size >= counts[e].item<int64_t>());
    start = ends[e];
  }
  CHECK(ends.back() == p.rows);
  // Every pair's row lies in its expert's group.
  const std::vector<int64_t> rows = to_vector(p.rows_of), of = to_vector(experts.view(-1));
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t e = of[i];
    CHECK(rows[i] >= (e == 0 ? 0 : ends[e - 1]));
    CHECK(rows[i] < ends[e]);
  }
}

TEST_CASE("moe router: dispatch then combine is the weighted sum of each token's rows", "[model]") {
  torch::manual_seed(5);
  const int64_t T = 9, d = 6, E = 3, k = 2;
  const at::Tensor x = torch::randn({T, d}).requires_grad_(true);
  const at::Tensor experts = torch::randint(0, E, {T, k}, at::kLong);
  const at::Tensor counts = at::zeros({E}).index_add_(0, experts.view(-1), at::ones({T * k}));
  const at::Tensor w = torch::rand({T, k}).requires_grad_(true);
  const model::DispatchPlan p = model::plan_dispatch(experts, counts, E);
  const at::Tensor buffer = model::dispatch(x, p);
  // Padding rows are zero: the buffer holds exactly T * k copies of tokens.
  CHECK(buffer.abs().sum(1).ne(0).sum().item<int64_t>() == T * k);
  const at::Tensor out = model::combine(buffer * 2.0, w, p);
  // Identity experts scaled by 2: out[t] = 2 * (w[t,0] + w[t,1]) * x[t], exactly (sums of two terms).
  const at::Tensor expected = 2.0 * w.sum(1, true) * x;
  CHECK(at::allclose(out, expected, 1e-6, 1e-6));
  out.sum().backward();
  // d/dx of sum(2 (w0 + w1) x) = 2 (w0 + w1); d/dw_tj = 2 * sum(x_t).
  CHECK(at::allclose(x.grad(), (2.0 * w.sum(1, true)).expand({T, d}), 1e-6, 1e-6));
  CHECK(at::allclose(w.grad(), (2.0 * x.sum(1, true)).expand({T, k}), 1e-5, 1e-5));
}

TEST_CASE("moe router: softmax top-k, weights and the balancing loss", "[model]") {
  torch::manual_seed(7);
  const int64_t T = 10, d = 8, E = 5;
  MoeSection moe = moe_of(E, 2);
  const at::Tensor x = torch::randn({T, d});
  const at::Tensor w = torch::randn({E, d}).requires_grad_(true);
  const model::Routing r = model::route(x, w, at::Tensor(), moe, /*with_aux_loss=*/true);
  const at::Tensor probs = at::softmax(at::mm(x, w.t()), -1);
  const at::Tensor top = std::get<1>(at::topk(probs, 2, -1));
  CHECK(at::equal(r.experts, top));
  CHECK(at::allclose(r.weights, probs.gather(1, top)));  // not renormalised (moe.norm_topk false)
  CHECK(r.counts.sum().item<double>() == static_cast<double>(T * 2));
  // coef * E * sum_e f_e P_e, written out.
  const at::Tensor f = at::zeros({E}).index_add_(0, top.view(-1), at::ones({T * 2})) / (T * 2.0);
  const double aux = (0.01 * E * (f * probs.mean(0)).sum()).item<double>();
  REQUIRE(r.aux_loss.defined());
  CHECK(r.aux_loss.item<double>() == Approx(aux).epsilon(1e-6));
  r.aux_loss.backward();
  CHECK(w.grad().abs().sum().item<double>() > 0.0);  // the loss reaches the router

  moe.norm_topk = true;
  const model::Routing n = model::route(x, w, at::Tensor(), moe, false);
  CHECK(at::allclose(n.weights.sum(1), at::ones({T})));
  CHECK_FALSE(n.aux_loss.defined());
}

TEST_CASE("moe router: the selection bias moves the choice, not the weights", "[model]") {
  torch::manual_seed(9);
  const int64_t T = 12, d = 4, E = 4;
  MoeSection moe = moe_of(E, 1);
  moe.balance = LoadBalance::kBias;
  const at::Tensor x = torch::randn({T, d}), w = torch::randn({E, d});
  const at::Tensor bias = torch::tensor({0.0f, 0.0f, 0.0f, 10.0f});  // expert 3 wins every selection
  const model::Routing r = model::route(x, w, bias, moe, true);
  CHECK(r.experts.eq(3).all().item<bool>());
  const at::Tensor probs = at::softmax(at::mm(x, w.t()), -1);
  CHECK(at::allclose(r.weights, probs.select(1, 3).unsqueeze(1)));  // the unbiased score of expert 3
  CHECK_FALSE(r.aux_loss.defined());  // no loss term under balance bias
}

TEST_CASE("moe router: forced balance gives every expert the same tokens", "[model]") {
  torch::manual_seed(11);
  MoeSection moe = moe_of(4, 2);
  moe.force_balance = true;
  const model::Routing r = model::route(torch::randn({8, 6}), torch::randn({4, 6}), at::Tensor(), moe, false);
  CHECK(at::equal(r.counts, torch::full({4}, 4.0f)));
  CHECK(r.experts[0][0].item<int64_t>() == 0);
  CHECK(r.experts[0][1].item<int64_t>() == 1);
  CHECK(r.experts[2][0].item<int64_t>() == 0);  // pair 4 -> expert 0
}

TEST_CASE("moe router: sigmoid scores renormalise the chosen weights", "[model]") {
  torch::manual_seed(13);
  MoeSection moe = moe_of(6, 3);
  moe.score = RouterScore::kSigmoid;
  const model::Routing r = model::route(torch::randn({7, 5}), torch::randn({6, 5}), at::Tensor(), moe, false);
  CHECK(at::allclose(r.weights.sum(1), at::ones({7})));
  CHECK(r.scores.min().item<double>() > 0.0);
  CHECK(r.scores.max().item<double>() < 1.0);
}
