#include "lib/model/moe_router.h"

#include <ATen/autocast_mode.h>                 // (autocast dispatch keys)
#include <c10/core/DispatchKeySet.h>            // c10::autocast_dispatch_keyset
#include <c10/core/impl/LocalDispatchKeySet.h>  // c10::impl::ExcludeDispatchKeyGuard
#include <torch/torch.h>                        // torch::autograd::Function

#include <algorithm>  // std::max
#include <vector>     // std::vector

#include "lib/model/layers.h"  // kGroupRowAlign
#include "lib/util/error.h"    // FP8T_CHECK

namespace fp8t {
namespace model {
namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

class GatherRows : public torch::autograd::Function<GatherRows> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y, const at::Tensor& rows) {
    ctx->save_for_backward({rows});
    ctx->saved_data["rows_of_y"] = y.size(0);
    return y.index_select(0, rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor rows = ctx->get_saved_variables()[0];
    std::vector<int64_t> shape = grads[0].sizes().vec();
    shape[0] = ctx->saved_data["rows_of_y"].toInt();
    return {at::zeros(shape, grads[0].options()).index_copy_(0, rows, grads[0]), at::Tensor()};
  }
};

// The inverse of GatherRows: rows of `src` written to rows `rows` of a zero buffer of `total` rows.
// Saves only the index (an out-of-place index_copy would keep `src` for its backward: k rows of d
// per token in the dispatch).
class ScatterRows : public torch::autograd::Function<ScatterRows> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& src, const at::Tensor& rows,
                            int64_t total) {
    ctx->save_for_backward({rows});
    std::vector<int64_t> shape = src.sizes().vec();
    shape[0] = total;
    return at::zeros(shape, src.options()).index_copy_(0, rows, src);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {grads[0].index_select(0, ctx->get_saved_variables()[0]), at::Tensor(), at::Tensor()};
  }
};

// Round robin: pair t * k + j goes to expert (t * k + j) mod E.
at::Tensor balanced_experts(int64_t tokens, int64_t k, int64_t experts, const at::TensorOptions& opt) {
  return at::remainder(at::arange(tokens * k, opt.dtype(at::kLong)), experts).view({tokens, k});
}

// The balancing loss coef * E * sum_e f_e P_e (Switch Transformer's form; OLMoE's and Mixtral's).
at::Tensor aux_loss_of(const at::Tensor& scores, const at::Tensor& counts, const MoeSection& moe) {
  const int64_t tokens = scores.size(0), E = scores.size(1);
  const at::Tensor probs = moe.score == RouterScore::kSigmoid ? scores / scores.sum(-1, true) : scores;
  const at::Tensor f = counts / static_cast<double>(tokens * moe.top_k);
  return (f * probs.mean(0)).sum() * (moe.aux_loss_coef * static_cast<double>(E));
}

}  // namespace

int64_t padded_rows(int64_t assignments, int64_t experts) {
  return round_up(assignments, kGroupRowAlign) + kGroupRowAlign * experts;
}

Routing route(const at::Tensor& x, const at::Tensor& router_weight, const at::Tensor& bias, const MoeSection& moe,
              bool with_aux_loss) {
  FP8T_CHECK(x.dim() == 2 && router_weight.dim() == 2 && x.size(1) == router_weight.size(1), "moe router: tokens ",
             x.sizes(), " and router weight ", router_weight.sizes(), " do not match");
  const int64_t tokens = x.size(0), E = router_weight.size(0), k = moe.top_k;
  Routing r;
  at::Tensor logits;
  {
    // The router never runs in a lower precision: autocast off, FP32 operands.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    logits = at::mm(x.to(at::kFloat), router_weight.to(at::kFloat).t());
  }
  r.scores = moe.score == RouterScore::kSigmoid ? at::sigmoid(logits) : at::softmax(logits, -1);
  if (moe.force_balance) {
    r.experts = balanced_experts(tokens, k, E, x.options());
  } else {
    const at::Tensor select = bias.defined() ? r.scores.detach() + bias : r.scores.detach();
    r.experts = std::get<1>(at::topk(select, k, -1));
  }
  r.weights = r.scores.gather(1, r.experts);
  if (moe.norm_topk || moe.score == RouterScore::kSigmoid) r.weights = r.weights / (r.weights.sum(-1, true) + 1e-20);
  r.counts = at::zeros({E}, x.options().dtype(at::kFloat))
                 .index_add_(0, r.experts.reshape({-1}), at::ones({tokens * k}, x.options().dtype(at::kFloat)));
  if (with_aux_loss && moe.balance == LoadBalance::kAuxLoss && moe.aux_loss_coef > 0.0) {
    r.aux_loss = aux_loss_of(r.scores, r.counts, moe);
  }
  return r;
}

DispatchPlan plan_dispatch(const at::Tensor& experts, const at::Tensor& counts, int64_t num_experts) {
  DispatchPlan p;
  p.top_k = experts.size(1);
  const int64_t pairs = experts.numel();
  p.rows = padded_rows(pairs, num_experts);
  const at::Tensor flat = experts.reshape({-1});
  const at::Tensor n = counts.to(at::kLong);
  // Each group: its count rounded up to the alignment, at least one aligned block of zero rows.
  const at::Tensor padded = at::clamp_min(at::floor_divide(n + (kGroupRowAlign - 1), kGroupRowAlign) * kGroupRowAlign,
                                          kGroupRowAlign);
  const at::Tensor ends = at::cumsum(padded, 0);
  const at::Tensor starts = ends - padded;
  // The last group runs to the end of the buffer.
  p.offsets = ends.index_fill(0, at::full({1}, num_experts - 1, ends.options()), p.rows).to(at::kInt);
  // A stable sort keeps each expert's pairs in token order; a pair's rank in its expert's run is
  // its sorted position minus the run's start.
  const auto sorted = at::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const at::Tensor& expert_of = std::get<0>(sorted);
  const at::Tensor& pair_of = std::get<1>(sorted);
  const at::Tensor run_starts = at::cumsum(n, 0) - n;
  const at::Tensor rank = at::arange(pairs, flat.options()) - run_starts.index_select(0, expert_of);
  const at::Tensor row = starts.index_select(0, expert_of) + rank;
  p.rows_of = at::empty({pairs}, flat.options()).index_copy_(0, pair_of, row);
  return p;
}

at::Tensor dispatch(const at::Tensor& x, const DispatchPlan& plan) {
  const int64_t tokens = x.size(0), d = x.size(1);
  const at::Tensor each = x.unsqueeze(1).expand({tokens, plan.top_k, d}).reshape({tokens * plan.top_k, d});
  return scatter_rows(each, plan.rows_of, plan.rows);
}

at::Tensor combine(const at::Tensor& y, const at::Tensor& weights, const DispatchPlan& plan) {
  const int64_t tokens = weights.size(0), d = y.size(1);
  return weighted_sum(gather_rows(y, plan.rows_of).view({tokens, plan.top_k, d}), weights);
}

at::Tensor gather_rows(const at::Tensor& y, const at::Tensor& rows) { return GatherRows::apply(y, rows); }

at::Tensor scatter_rows(const at::Tensor& src, const at::Tensor& rows, int64_t total) {
  return ScatterRows::apply(src, rows, total);
}

at::Tensor weighted_sum(const at::Tensor& picked, const at::Tensor& weights) {
  return at::bmm(weights.unsqueeze(1).to(picked.scalar_type()), picked).squeeze(1);
}

ReceivedPlan plan_received(const at::Tensor& from) {
  const at::Tensor n = from.to(at::kLong).contiguous();
  const int64_t ranks = n.size(0), local = n.size(1);
  const int64_t* c = n.data_ptr<int64_t>();
  // Each expert's group: its rows from every rank, rounded up to the alignment, at least one block.
  std::vector<int64_t> start(local), filled(local, 0);
  ReceivedPlan p;
  p.offsets = at::empty({local}, at::kInt);
  int32_t* ends = p.offsets.data_ptr<int32_t>();
  for (int64_t e = 0; e < local; ++e) {
    int64_t count = 0;
    for (int64_t r = 0; r < ranks; ++r) count += c[r * local + e];
    start[e] = p.rows;
    p.rows += std::max(kGroupRowAlign, round_up(count, kGroupRowAlign));
    ends[e] = static_cast<int32_t>(p.rows);
  }
  p.rows_of = at::empty({n.sum().item<int64_t>()}, at::kLong);
  int64_t* out = p.rows_of.data_ptr<int64_t>();
  for (int64_t r = 0, i = 0; r < ranks; ++r) {
    for (int64_t e = 0; e < local; ++e) {
      for (int64_t j = 0; j < c[r * local + e]; ++j) out[i++] = start[e] + filled[e]++;
    }
  }
  return p;
}

}  // namespace model
}  // namespace fp8t
