#include "lib/model/moe_layer.h"

#include <cmath>  // std::sqrt

#include <numeric>  // std::accumulate
#include <vector>   // std::vector

#include "lib/model/moe_router.h"   // route, plan_dispatch, dispatch, combine, plan_received, scatter_rows
#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::autocast_dtype_or, to_ivalue, from_ivalue

namespace fp8t {
namespace model {
namespace {

// Hands the balancing loss its gradient in the backward without adding it to the step's loss: the
// forward returns `out` unchanged; the backward passes out's gradient through and gives the loss
// the gradient `scale` (1 / micro-batches, as the step scales the cross-entropy).
class AuxLossGradient : public torch::autograd::Function<AuxLossGradient> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& out, const at::Tensor& aux_loss,
                            double scale) {
    ctx->saved_data["scale"] = scale;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const double scale = ctx->saved_data["scale"].toDouble();
    return {grads[0], at::full({}, scale, grads[0].options().dtype(at::kFloat)), at::Tensor()};
  }
};

// An all-to-all of rows through the expert group, differentiable: the backward sends the
// gradient back the same way, reversed.
class ExchangeRows : public torch::autograd::Function<ExchangeRows> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            const c10::intrusive_ptr<ExpertExchange>& exchange, const std::vector<int64_t>& send,
                            const std::vector<int64_t>& recv) {
    ctx->saved_data["exchange"] = compat::to_ivalue(exchange);
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return exchange->all_to_all(rows.contiguous(), send, recv);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto exchange = compat::from_ivalue<ExpertExchange>(ctx->saved_data["exchange"]);
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {exchange->all_to_all(grads[0].contiguous(), recv, send), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The sums of `counts` (int64 [ranks * local], on the CPU) per rank's run of `local` entries.
std::vector<int64_t> per_rank(const at::Tensor& counts, int64_t ranks) {
  const at::Tensor sums = counts.view({ranks, -1}).sum(1).contiguous();
  return std::vector<int64_t>(sums.data_ptr<int64_t>(), sums.data_ptr<int64_t>() + ranks);
}

}  // namespace

Router::Router(int64_t experts, int64_t d_model) {
  weight = register_parameter("weight", torch::empty({experts, d_model}));
  bias = register_buffer("bias", torch::zeros({experts}));
  torch::NoGradGuard no_grad;
  weight.normal_(0.0, 0.02);
}

MoeMlp::MoeMlp(const ModelSection& cfg) : moe_(cfg.moe) {
  const int64_t E = moe_.experts, d = cfg.d_model, F = cfg.expert_ff_dim();
  const auto k = static_cast<double>(moe_.top_k);
  router = register_module("router", std::make_shared<Router>(E, d));
  add_grouped_slot("experts_fc", std::make_shared<GroupedLinear>(E, d, 2 * F, k), &experts_fc);
  act_ = register_module("experts_act", std::make_shared<Activation>(Activation::Kind::kSwiGLU));
  add_grouped_slot("experts_proj", std::make_shared<GroupedLinear>(E, F, d, k), &experts_proj);
  if (moe_.shared_experts > 0) {
    shared = register_module("shared", std::make_shared<Mlp>(d, moe_.shared_experts * F, /*swiglu=*/true, cfg.bias,
                                                            cfg.dropout));
  }
  const auto f32 = torch::TensorOptions().dtype(at::kFloat);
  step_load_ = register_buffer("step_load", torch::zeros({E}, f32));
  load_ = register_buffer("load", torch::zeros({E}, f32));
  sums_ = register_buffer("sums", torch::zeros({3}, f32));
  passes_ = register_buffer("passes", torch::zeros({}, f32));
}

void MoeMlp::init_output_weights(double std) {
  torch::NoGradGuard no_grad;
  std::static_pointer_cast<GroupedLinear>(experts_proj)->weight.normal_(0.0, std);
  if (shared) shared->init_output_weights(std);
}

at::Tensor MoeMlp::forward(const at::Tensor& x) {
  const auto shape = x.sizes().vec();
  // The experts' and the shared MLP's input in the dtype their GEMMs read (bf16 under autocast).
  const at::ScalarType hp = compat::autocast_dtype_or(x.device().type(), x.scalar_type());
  const at::Tensor x2 = x.reshape({-1, shape.back()}).to(hp);
  at::Tensor out = experts_forward(x2);
  if (shared) out = out + shared->forward(x2);
  return out.to(hp).view(shape);
}

at::Tensor MoeMlp::experts_forward(const at::Tensor& x2) {
  const bool training = is_training();
  const Routing r = route(x2, router->weight, moe_.balance == LoadBalance::kBias ? router->bias : at::Tensor(), moe_,
                          training && torch::GradMode::is_enabled());
  at::Tensor out = exchange_ ? exchanged_experts(x2, r) : local_experts(x2, r);
  if (r.aux_loss.defined()) out = AuxLossGradient::apply(out, r.aux_loss, aux_grad_scale_);
  return out;
}

at::Tensor MoeMlp::local_experts(const at::Tensor& x2, const Routing& r) {
  const DispatchPlan plan = plan_dispatch(r.experts, r.counts, moe_.experts);
  const at::Tensor h = act_->forward(experts_fc->forward(dispatch(x2, plan), plan.offsets));
  const at::Tensor out = combine(experts_proj->forward(h, plan.offsets), r.weights, plan);
  if (is_training()) record(r.counts, r.aux_loss, r.experts.numel(), plan.rows);
  return out;
}

// The pairs leave sorted by expert, so each destination rank's rows are one consecutive run; the
// ranks first swap how many rows each sends to each of the other's experts (a small all-to-all),
// then the rows; the received rows go through this rank's experts in one padded buffer and back.
at::Tensor MoeMlp::exchanged_experts(const at::Tensor& x2, const Routing& r) {
  const int64_t T = x2.size(0), d = x2.size(1), k = moe_.top_k, ranks = exchange_->ranks();
  const int64_t local = moe_.experts / ranks;
  const at::Tensor counts = r.counts.to(at::kLong);
  const std::vector<int64_t> ones(static_cast<size_t>(ranks), 1);
  const at::Tensor from = exchange_->all_to_all(counts.view({ranks, local}), ones, ones).to(at::kCPU);
  const std::vector<int64_t> send = per_rank(counts.to(at::kCPU), ranks), recv = per_rank(from.view({-1}), ranks);
  const at::Tensor order = std::get<1>(at::sort(r.experts.reshape({-1}), /*stable=*/true, 0, false));
  const at::Tensor rows = x2.unsqueeze(1).expand({T, k, d}).reshape({T * k, d}).index_select(0, order);
  const at::Tensor got = ExchangeRows::apply(rows, exchange_, send, recv);
  const ReceivedPlan plan = plan_received(from);
  const at::Tensor rows_of = plan.rows_of.to(x2.device()), offsets = plan.offsets.to(x2.device());
  const at::Tensor buffer = scatter_rows(got, rows_of, plan.rows);
  const at::Tensor h = act_->forward(experts_fc->forward(buffer, offsets));
  const at::Tensor y = gather_rows(experts_proj->forward(h, offsets), rows_of);
  const at::Tensor back = ExchangeRows::apply(y, exchange_, recv, send);
  const at::Tensor pairs = scatter_rows(back, order, T * k);
  if (is_training()) record(r.counts, r.aux_loss, std::accumulate(recv.begin(), recv.end(), int64_t{0}), plan.rows);
  return weighted_sum(pairs.view({T, k, d}), r.weights);
}

void MoeMlp::keep_experts(int64_t first, int64_t count) {
  for (auto* slot : {&experts_fc, &experts_proj}) {
    auto grouped = std::dynamic_pointer_cast<GroupedLinear>(*slot);
    FP8T_CHECK(grouped != nullptr, "moe: keep_experts runs before the FP8 rewrite");
    grouped->keep_groups(first, count);
  }
}

void MoeMlp::record(const at::Tensor& counts, const at::Tensor& aux_loss, int64_t assignments, int64_t rows) {
  torch::NoGradGuard no_grad;
  load_.add_(counts);
  if (moe_.balance == LoadBalance::kBias) step_load_.add_(counts);
  sums_.select(0, 0).add_(static_cast<double>(rows - assignments));
  sums_.select(0, 1).add_(static_cast<double>(rows));
  if (aux_loss.defined()) sums_.select(0, 2).add_(aux_loss.detach());
  passes_.add_(1.0);
}

void MoeMlp::end_step(const at::Tensor& skipped) {
  if (moe_.balance != LoadBalance::kBias) return;
  torch::NoGradGuard no_grad;
  // DeepSeek-V3's update: under-loaded experts' bias rises, over-loaded ones' falls.
  const at::Tensor move = at::sign(step_load_.mean() - step_load_) * moe_.bias_update_rate;
  router->bias.add_(skipped.defined() ? move * (skipped == 0).to(at::kFloat) : move);
  step_load_.zero_();
}

RoutingStats MoeMlp::read_stats() {
  torch::NoGradGuard no_grad;
  const at::Tensor host = at::cat({load_, sums_, passes_.view({1})}).to(at::kCPU, at::kDouble);
  const int64_t E = load_.numel();
  const at::Tensor load = host.narrow(0, 0, E);
  const double* sums = host.data_ptr<double>() + E;
  RoutingStats s;
  s.tokens_min = load.min().item<double>();
  s.tokens_max = load.max().item<double>();
  const double mean = load.mean().item<double>();
  s.tokens_mean = mean;
  s.tokens_cv = mean > 0.0 ? std::sqrt(((load - mean).pow(2)).mean().item<double>()) / mean : 0.0;
  s.padded_frac = sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
  s.aux_loss = sums[3] > 0.0 ? sums[2] / sums[3] : 0.0;
  load_.zero_();
  sums_.zero_();
  passes_.zero_();
  return s;
}

}  // namespace model
}  // namespace fp8t
