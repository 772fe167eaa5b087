#include "lib/dist/fully_sharded.h"

#include <torch/torch.h>  // torch::autograd::Function

#include <algorithm>      // std::any_of
#include <string>         // std::string
#include <unordered_map>  // std::unordered_map

#include "lib/dist/accumulator_hooks.h"  // AccumulatorHooks
#include "lib/fp8/layers/fp8_linear.h"   // fp8::Fp8Linear
#include "lib/fp8/recipes/scaling.h"     // fp8::Scaling
#include "lib/model/model.h"             // model::Model
#include "lib/util/error.h"              // FP8T_CHECK, FP8T_INPUT_CHECK
#include "lib/util/torch_compat.h"       // compat::to_ivalue, from_ivalue

namespace fp8t::dist {

struct FullyShardedModel::Unit {
  enum class State { kSharded, kInFlight, kGathered };
  std::vector<std::unique_ptr<ShardGroup>> groups;  // FP8 weights first, then the rest
  std::vector<at::Tensor> params;
  int remaining = 0;      // gradients still to arrive in this backward
  bool launched = false;  // reduced in this micro-batch (no more gradients may arrive)
  State state = State::kSharded;
};

namespace {

// An identity at a unit's output whose backward runs when the unit's backward begins.
struct BoundaryTarget : torch::CustomClassHolder {
  FullyShardedModel* model = nullptr;
  int unit = 0;
};

class UnitBoundary : public torch::autograd::Function<UnitBoundary> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList xs,
                                                const c10::intrusive_ptr<BoundaryTarget>& target) {
    ctx->saved_data["target"] = compat::to_ivalue(target);
    return xs.vec();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto target = compat::from_ivalue<BoundaryTarget>(ctx->saved_data["target"]);
    target->model->pre_backward(target->unit);
    grads.emplace_back();  // the target (not a tensor)
    return grads;
  }
};

// The FP8 Linears whose weight the model reads nowhere else and only in FP8 (fprop and dgrad:
// override_linear_precision), under a recipe whose sharded weights travel as FP8 codes
// (Scaling::WeightParts::fp8_gather), by the weight's TensorImpl: their weights travel as FP8.
std::unordered_map<const void*, fp8::Fp8Linear*> fp8_weights(model::Model& model) {
  std::unordered_map<const void*, int> uses;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) ++uses[item.value().unsafeGetTensorImpl()];
  std::unordered_map<const void*, fp8::Fp8Linear*> out;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    auto* layer = dynamic_cast<fp8::Fp8Linear*>(m.get());
    if (layer == nullptr) continue;
    const auto& ovr = layer->scaling().recipe().override_linear_precision;
    const void* impl = layer->weight.unsafeGetTensorImpl();
    const bool gathered_as_fp8 = layer->scaling().weight_parts().fp8_gather;
    if (gathered_as_fp8 && !ovr.fprop && !ovr.dgrad && uses[impl] == 1) out[impl] = layer;
  }
  return out;
}

}  // namespace

int resolve_shard_group_size(int64_t configured, int world, int local_world) {
  const int64_t n = configured == 0 ? world : configured < 0 ? local_world : configured;
  FP8T_INPUT_CHECK(n >= 1 && n <= world && world % n == 0, "dist.shard_group_size ", configured,
                   configured < 0 ? " (one group per node: LOCAL_WORLD_SIZE=" + std::to_string(local_world) + ")" : "",
                   " does not divide the job's ", world, " ranks into shard groups: expected 0 (all ranks), -1 (one "
                   "group per node) or a divisor of ", world);
  return static_cast<int>(n);
}

FullyShardedModel::FullyShardedModel(std::shared_ptr<Communicator> comm, model::Model& model, fp8::Scaling* scaling,
                                     const Options& options)
    : comm_(std::move(comm)), options_(options) {
  const int world = comm_->world_size();
  const int n = options_.shard_group_size > 0 ? options_.shard_group_size : world;
  FP8T_CHECK(world % n == 0, "FullyShardedModel: shard groups of ", n, " do not divide ", world, " ranks");
  shard_comm_ = comm_;
  if (n < world) {  // hybrid: shard within groups of n consecutive ranks, replicate across them
    const int g = comm_->rank() / n, i = comm_->rank() % n;
    std::vector<int> shard, replica;
    for (int r = 0; r < n; ++r) shard.push_back(g * n + r);
    for (int r = i; r < world; r += n) replica.push_back(r);
    shard_comm_ = comm_->subgroup("zero3-shard-" + std::to_string(g), shard);
    replica_comm_ = comm_->subgroup("zero3-replica-" + std::to_string(i), replica);
  }
  ctx_.comm = shard_comm_.get();
  const auto params = model.unique_named_parameters();
  FP8T_CHECK(!params.empty(), "ZeRO-3: the model has no parameters");
  ctx_.device = params.front().second.device();
  ctx_.compute_dtype = options_.compute_dtype;
  ctx_.reduce_dtype = options_.reduce_dtype;
  ctx_.scaling = scaling;
  head_ = model.num_units() - 1;
  for (int u = 0; u < model.num_units(); ++u) reads_.push_back(model.units_read_by(u));
  build_units(model);
  install_hooks();
}

FullyShardedModel::~FullyShardedModel() = default;

void FullyShardedModel::build_units(model::Model& model) {
  const auto fp8 = fp8_weights(model);
  std::vector<std::vector<GroupParam>> fp8_params(model.num_units()), other(model.num_units());
  for (const auto& [name, p] : model.unique_named_parameters()) {
    const int u = model.unit_of(name);
    FP8T_CHECK(u >= 0 && u < model.num_units(), "ZeRO-3: parameter ", name, " belongs to no unit");
    const auto it = fp8.find(p.unsafeGetTensorImpl());
    if (it != fp8.end()) {
      fp8_params[u].push_back(GroupParam{name, p, it->second, num_fp8_++});
    } else {
      other[u].push_back(GroupParam{name, p, nullptr, -1});
    }
  }
  for (int u = 0; u < model.num_units(); ++u) {
    auto unit = std::make_unique<Unit>();
    for (auto* list : {&fp8_params[u], &other[u]}) {
      for (const GroupParam& p : *list) unit->params.push_back(p.param);
      if (!list->empty()) unit->groups.push_back(std::make_unique<ShardGroup>(std::move(*list), ctx_));
    }
    FP8T_CHECK(!unit->params.empty(), "ZeRO-3: unit ", u, " has no parameters");
    unit->remaining = static_cast<int>(unit->params.size());
    units_.push_back(std::move(unit));
  }
}

void FullyShardedModel::install_hooks() {
  hooks_ = std::make_unique<AccumulatorHooks>();
  for (int u = 0; u < num_units(); ++u) {
    for (const at::Tensor& p : units_[u]->params) {
      hooks_->add(p, [this, u] { on_gradient_arriving(u); }, [this, u] { on_gradient_ready(u); });
    }
  }
}

const std::vector<int>& FullyShardedModel::region_units(int region) const {
  return reads_.at(static_cast<size_t>(region));
}

// ---- weights ------------------------------------------------------------------------------

// The FP8 parts are cast once per (weight epoch, master version); whole_amax recipes first
// reduce every FP8 weight's amax over the ranks in one collective.
void FullyShardedModel::refresh_weight_key() {
  const ShardingContext::WeightKey key{ctx_.scaling ? ctx_.scaling->weight_epoch() : 0, master_version_};
  if (key == ctx_.weight_key) return;
  ctx_.weight_key = key;
  if (ctx_.scaling == nullptr || num_fp8_ == 0 || !ctx_.scaling->weight_parts().whole_amax) return;
  at::NoGradGuard no_grad;
  ctx_.weight_amax = at::zeros({num_fp8_}, at::TensorOptions().dtype(at::kFloat).device(ctx_.device));
  for (const auto& unit : units_) {
    for (const auto& g : unit->groups) g->record_weight_amax(ctx_.weight_amax);
  }
  shard_comm_->all_reduce(ctx_.weight_amax, ReduceOp::kMax);
}

void FullyShardedModel::issue(int u, bool record) {
  Unit& unit = *units_[u];
  if (unit.state != Unit::State::kSharded) return;
  refresh_weight_key();
  for (auto& g : unit.groups) g->issue_gather(record);
  unit.state = Unit::State::kInFlight;
}

void FullyShardedModel::ensure(int region, bool record) {
  for (int u : region_units(region)) {
    issue(u, record);
    Unit& unit = *units_[u];
    if (unit.state != Unit::State::kInFlight) continue;
    for (auto& g : unit.groups) g->complete_gather();
    unit.state = Unit::State::kGathered;
  }
}

void FullyShardedModel::free_unit(int u) {
  Unit& unit = *units_[u];
  for (auto& g : unit.groups) g->free();
  unit.state = Unit::State::kSharded;
}

void FullyShardedModel::before_forward(int region) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool record = at::GradMode::is_enabled();
  if (region == 0) {  // the first unit: a forward begins
    if (record) flush_reductions();  // a new micro-batch
    // What an earlier forward without backward left gathered (a forward ends with the head).
    for (int u = 0; u < num_units(); ++u) free_unit(u);
  }
  ensure(region, record);
  for (int64_t i = 1; i <= options_.prefetch && region + i < num_units(); ++i) {
    for (int u : region_units(static_cast<int>(region + i))) issue(u, record);
  }
}

std::vector<at::Tensor> FullyShardedModel::after_forward(int region, std::vector<at::Tensor> outputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool backward = at::GradMode::is_enabled() &&
                        std::any_of(outputs.begin(), outputs.end(), [](const at::Tensor& t) { return t.requires_grad(); });
  if (backward) {
    auto target = c10::make_intrusive<BoundaryTarget>();
    target->model = this;
    target->unit = region;
    outputs = UnitBoundary::apply(at::TensorList(outputs), target);
  }
  // Without a backward nothing is kept; the head's backward follows at once.
  if (!backward || (options_.reshard_after_forward && region != head_)) {
    for (int u : region_units(region)) free_unit(u);
  }
  return outputs;
}

void FullyShardedModel::pre_backward(int region) {
  std::lock_guard<std::mutex> lock(mutex_);
  ensure(region, /*record=*/false);  // the forward's codes (same weight key): nothing is cast or recorded
  for (int64_t i = 1; i <= options_.prefetch && region - i >= 0; ++i) {
    for (int u : region_units(static_cast<int>(region - i))) issue(u, /*record=*/false);
  }
}

void FullyShardedModel::release_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int u = 0; u < num_units(); ++u) free_unit(u);
}

// ---- gradients ----------------------------------------------------------------------------

void FullyShardedModel::on_gradient_arriving(int u) {
  std::lock_guard<std::mutex> lock(mutex_);
  Unit& unit = *units_[u];
  FP8T_CHECK(!unit.launched, "ZeRO-3: a gradient of unit ", u, " arrived after its gradients were reduce-scattered "
             "in this backward (is a parameter used in two places of a recomputed part?)");
  for (auto& g : unit.groups) g->allocate_gradients();
}

void FullyShardedModel::on_gradient_ready(int u) {
  std::lock_guard<std::mutex> lock(mutex_);
  Unit& unit = *units_[u];
  if (--unit.remaining > 0) return;
  launch_reduce(u);
  ++reduced_in_backward_;
  // Every use of the unit's weights in this backward is over: they go.
  free_unit(u);
}

// A unit's reduce-scatter; the one launched before it (which ran during this unit's backward)
// is retired now, so at most one is in flight while the next unit computes.
void FullyShardedModel::launch_reduce(int u) {
  Unit& unit = *units_[u];
  for (auto& g : unit.groups) g->launch_reduce();
  unit.launched = true;
  if (last_launched_ >= 0 && last_launched_ != u) {
    for (auto& g : units_[last_launched_]->groups) g->retire_reduce();
  }
  last_launched_ = u;
}

// The end of a micro-batch's backward: units some of whose gradients did not arrive (a
// parameter without gradient) are reduced now, in the same order on every rank, and every
// reduction is retired.
void FullyShardedModel::flush_reductions() {
  for (int u = num_units() - 1; u >= 0; --u) {
    Unit& unit = *units_[u];
    const bool pending = std::any_of(unit.groups.begin(), unit.groups.end(), [](const auto& g) { return g->has_gradients(); });
    if (pending && !unit.launched) launch_reduce(u);
  }
  for (auto& unit : units_) {
    for (auto& g : unit->groups) g->retire_reduce();
    unit->remaining = static_cast<int>(unit->params.size());
    unit->launched = false;
  }
  last_launched_ = -1;
}

void FullyShardedModel::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_reductions();
  if (replica_comm_) {
    for (auto& unit : units_) {
      for (auto& g : unit->groups) g->launch_replica_reduce(*replica_comm_);
    }
  }
  const double inv_world = 1.0 / static_cast<double>(comm_->world_size());
  for (auto& unit : units_) {
    for (auto& g : unit->groups) g->average(inv_world);
  }
  for (int u = 0; u < num_units(); ++u) free_unit(u);
  reduced_in_last_step_ = reduced_in_backward_;
  reduced_in_backward_ = 0;
}

void FullyShardedModel::parameters_updated() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++master_version_;
}

void FullyShardedModel::zero_grad() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& unit : units_) {
    for (auto& g : unit->groups) g->release_gradients();
  }
}

// ---- state --------------------------------------------------------------------------------

std::vector<FullyShardedModel::Segment> FullyShardedModel::segments() const {
  std::vector<Segment> out;
  for (const auto& unit : units_) {
    for (const auto& g : unit->groups) {
      for (size_t k = 0; k < g->params().size(); ++k) {
        const ShardLayout::Part p = g->part(k);
        if (p.length == 0) continue;
        out.push_back(Segment{g->params()[k].name, p.begin, p.length, g->master().narrow(0, p.shard_offset, p.length),
                              g->segment_grad(k)});
      }
    }
  }
  return out;
}

std::vector<at::Tensor> FullyShardedModel::gradient_shards() const {
  std::vector<at::Tensor> out;
  for (const auto& unit : units_) {
    for (const auto& g : unit->groups) {
      FP8T_CHECK(g->grad_shard().defined(), "FullyShardedModel::gradient_shards before finish()");
      out.push_back(g->grad_shard());
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> FullyShardedModel::gather_full_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& unit : units_) {
    for (const auto& g : unit->groups) {
      const std::vector<at::Tensor> full = g->gather_full();
      for (size_t k = 0; k < full.size(); ++k) out.emplace_back(g->params()[k].name, full[k].cpu());
    }
  }
  return out;
}

FullyShardedModel::Bytes FullyShardedModel::bytes() const {
  Bytes b;
  for (const auto& unit : units_) {
    for (const auto& g : unit->groups) {
      b.master += g->master().numel() * 4;
      b.grad_shards += g->layout().shard_numel * 4;
    }
  }
  b.gathered_peak = ctx_.gathered_peak;
  b.grad_buffer_peak = ctx_.grad_buffer_peak;
  return b;
}

}  // namespace fp8t::dist
