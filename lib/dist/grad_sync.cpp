#include "lib/dist/grad_sync.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>  // LambdaPostHook
#include <torch/csrc/autograd/variable.h>                // impl::grad_accumulator

#include <algorithm>  // std::max, std::min
#include <utility>  // std::pair, std::declval

#include <ATen/ATen.h>  // at::zeros, at::NoGradGuard

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t::dist {

struct GradientSync::Hooks {
  // The accumulator handle type changed between LibTorch releases (shared_ptr in 2.11,
  // intrusive_ptr later); take whatever grad_accumulator() returns.
  using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<std::pair<NodePtr, uintptr_t>> installed;
};

GradientSync::GradientSync(std::shared_ptr<Communicator> comm, std::vector<at::Tensor> params, int64_t bucket_bytes,
                           bool shard)
    : comm_(std::move(comm)), params_(std::move(params)), shard_(shard), hooks_(std::make_unique<Hooks>()) {
  FP8T_CHECK(!params_.empty(), "GradientSync needs parameters");
  FP8T_CHECK(bucket_bytes > 0, "bucket size must be positive, got ", bucket_bytes);
  bucket_of_.assign(params_.size(), -1);
  offset_of_.assign(params_.size(), 0);
  for (size_t k = 0; shard_ && k < params_.size(); ++k) {
    FP8T_CHECK(params_[k].scalar_type() == at::kFloat && params_[k].is_contiguous(),
               "GradientSync: ZeRO-1 needs float32 contiguous parameters (parameter ", k, ")");
  }

  // Buckets in reverse parameter order; a new bucket starts when the dtype changes or the
  // current one reached bucket_bytes.
  std::vector<std::vector<size_t>> groups;
  int64_t group_bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const at::Tensor& p = params_[k];
    FP8T_CHECK(p.is_leaf() && p.requires_grad(), "GradientSync: parameter ", k, " is not a trainable leaf");
    const bool start_new = groups.empty() || group_bytes >= bucket_bytes ||
                           params_[groups.back().front()].scalar_type() != p.scalar_type();
    if (start_new) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(k);
    group_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  for (const auto& group : groups) {
    Bucket b;
    int64_t numel = 0;
    for (size_t k : group) numel += params_[k].numel();
    if (shard_) {  // padded so that every rank's shard has the same size
      const int64_t world = comm_->world_size();
      b.shard_numel = (numel + world - 1) / world;
      numel = b.shard_numel * world;
    }
    b.flat = at::zeros({numel}, params_[group.front()].options().requires_grad(false));
    int64_t offset = 0;
    for (size_t k : group) {
      at::Tensor& p = params_[k];
      const int64_t n = p.numel();
      at::Tensor view = b.flat.narrow(0, offset, n).view(p.sizes());
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      offset_of_[k] = offset;
      offset += n;
      bucket_of_[k] = static_cast<int>(buckets_.size());
    }
    b.params = group;
    buckets_.push_back(std::move(b));
  }
  complete_.assign(buckets_.size(), false);
  if (shard_) build_segments();

  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    FP8T_CHECK(acc, "GradientSync: parameter ", k, " has no gradient accumulator");
    const uintptr_t key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(k);
          return outputs;
        }));
    hooks_->installed.emplace_back(std::move(acc), key);
  }
}

GradientSync::~GradientSync() {
  for (auto& [acc, key] : hooks_->installed) acc->del_post_hook(key);
}

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_) {
    FP8T_CHECK(!b.pending.valid(), "GradientSync::arm: the previous step was not finished");
    b.remaining = static_cast<int>(b.params.size());
  }
  complete_.assign(buckets_.size(), false);
  next_to_launch_ = 0;
  launched_in_backward_ = 0;
  armed_ = true;
}

void GradientSync::on_gradient_ready(size_t param_index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  const int bi = bucket_of_[param_index];
  Bucket& b = buckets_[bi];
  if (b.remaining > 0 && --b.remaining == 0) complete_[bi] = true;
  const size_t before = next_to_launch_;
  launch_ready_in_order();
  launched_in_backward_ += static_cast<int>(next_to_launch_ - before);
}

void GradientSync::launch_ready_in_order() {
  while (next_to_launch_ < buckets_.size() && complete_[next_to_launch_]) launch(buckets_[next_to_launch_++]);
}

void GradientSync::launch(Bucket& b) {
  b.pending = shard_ ? comm_->reduce_scatter_async(own_shard(b), b.flat)
                     : comm_->all_reduce_async({b.flat}, ReduceOp::kSum);
}

at::Tensor GradientSync::own_shard(const Bucket& b) const {
  return b.flat.narrow(0, comm_->rank() * b.shard_numel, b.shard_numel);
}

void GradientSync::build_segments() {
  for (size_t k = 0; k < params_.size(); ++k) {
    const Bucket& b = buckets_[bucket_of_[k]];
    const int64_t lo = comm_->rank() * b.shard_numel, hi = lo + b.shard_numel;
    const int64_t first = std::max(lo, offset_of_[k]), last = std::min(hi, offset_of_[k] + params_[k].numel());
    if (last > first) segments_.push_back(Segment{k, first - offset_of_[k], last - first});
  }
}

std::vector<at::Tensor> GradientSync::gradient_shards() const {
  FP8T_CHECK(shard_, "GradientSync::gradient_shards needs ZeRO-1");
  std::vector<at::Tensor> out;
  for (const Bucket& b : buckets_) out.push_back(own_shard(b));
  return out;
}

void GradientSync::gather_parameters() {
  FP8T_CHECK(shard_, "GradientSync::gather_parameters needs ZeRO-1");
  at::NoGradGuard no_grad;
  // The owned segments go into the rank's shard of the (now consumed) gradient buffers ...
  for (const Segment& s : segments_) {
    const at::Tensor& p = params_[s.param];
    buckets_[bucket_of_[s.param]].flat.narrow(0, offset_of_[s.param] + s.begin, s.length)
        .copy_(p.detach().view(-1).narrow(0, s.begin, s.length));
  }
  // ... which are all-gathered in place (all launched, then waited in order) ...
  for (Bucket& b : buckets_) b.pending = comm_->all_gather_async(b.flat, own_shard(b));
  for (Bucket& b : buckets_) b.pending.wait();
  // ... and copied back into the parameters.
  for (size_t k = 0; k < params_.size(); ++k) {
    params_[k].detach().view(-1).copy_(buckets_[bucket_of_[k]].flat.narrow(0, offset_of_[k], params_[k].numel()));
  }
}

void GradientSync::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  FP8T_CHECK(armed_, "GradientSync::finish without arm()");
  // Buckets some of whose parameters got no gradient in this backward are launched here, in
  // order, so every rank issues the same sequence of collectives.
  while (next_to_launch_ < buckets_.size()) launch(buckets_[next_to_launch_++]);
  const double inv_world = 1.0 / static_cast<double>(comm_->world_size());
  for (Bucket& b : buckets_) {
    b.pending.wait();
    (shard_ ? own_shard(b) : b.flat).mul_(inv_world);  // ZeRO-1: only the shard holds sums over ranks
  }
  armed_ = false;
}

void GradientSync::zero_grad() {
  for (Bucket& b : buckets_) {
    b.flat.zero_();
    // Something may have replaced a grad (it must stay a view into its bucket): re-point it.
    char* base = static_cast<char*>(b.flat.data_ptr());
    int64_t offset = 0;
    for (size_t k : b.params) {
      at::Tensor& p = params_[k];
      const int64_t n = p.numel();
      const at::Tensor& g = p.grad();
      if (!g.defined() || g.data_ptr() != base + offset * static_cast<int64_t>(b.flat.element_size())) {
        p.mutable_grad() = b.flat.narrow(0, offset, n).view(p.sizes());
      }
      offset += n;
    }
  }
}

}  // namespace fp8t::dist
