#include "lib/dist/grad_sync.h"

#include <algorithm>  // std::max, std::min, std::any_of, std::fill
#include <deque>      // std::deque
#include <functional>  // std::function
#include <utility>    // std::pair

#include <ATen/ATen.h>  // at::zeros, at::empty, at::NoGradGuard

#include "lib/dist/accumulator_hooks.h"  // AccumulatorHooks
#include "lib/util/error.h"              // FP8T_CHECK

namespace fp8t::dist {

GradientSync::GradientSync(std::shared_ptr<Communicator> comm, std::vector<at::Tensor> params, int64_t bucket_bytes,
                           bool shard)
    : comm_(std::move(comm)), params_(std::move(params)), shard_(shard), hooks_(std::make_unique<AccumulatorHooks>()) {
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
    for (size_t k : group) {
      offset_of_[k] = b.numel;
      b.numel += params_[k].numel();
      bucket_of_[k] = static_cast<int>(buckets_.size());
    }
    if (shard_) {  // padded so that every rank's shard has the same size
      const int64_t world = comm_->world_size();
      b.shard_numel = (b.numel + world - 1) / world;
      b.numel = b.shard_numel * world;
    }
    b.options = params_[group.front()].options().requires_grad(false);
    b.params = group;
    // DDP: persistent buckets. ZeRO-1: allocated by the first gradient of a step, or now when
    // a parameter already holds a gradient (it is copied in).
    const bool has_grad = std::any_of(group.begin(), group.end(), [&](size_t k) { return params_[k].grad().defined(); });
    if (!shard_ || has_grad) allocate(b);
    buckets_.push_back(std::move(b));
  }
  complete_.assign(buckets_.size(), false);
  if (shard_) build_segments();
  peak_live_ = live_;
  install_hooks();
}

void GradientSync::install_hooks() {
  for (size_t k = 0; k < params_.size(); ++k) {
    std::function<void()> before;
    if (shard_) before = [this, k] { on_gradient_arriving(k); };
    hooks_->add(params_[k], std::move(before), [this, k] { on_gradient_ready(k); });
  }
}

GradientSync::~GradientSync() = default;

void GradientSync::allocate(Bucket& b) {
  at::NoGradGuard no_grad;
  b.flat = at::zeros({b.numel}, b.options);
  for (size_t k : b.params) {
    at::Tensor& p = params_[k];
    at::Tensor view = b.flat.narrow(0, offset_of_[k], p.numel()).view(p.sizes());
    if (p.grad().defined()) view.copy_(p.grad());
    p.mutable_grad() = view;
  }
  peak_live_ = std::max(peak_live_, ++live_);
}

void GradientSync::release(Bucket& b) {
  b.pending.wait();  // NCCL: the current stream waits for the reduce-scatter (see the header)
  for (size_t k : b.params) params_[k].mutable_grad().reset();
  b.flat.reset();
  --live_;
}

void GradientSync::attach_shard(Bucket& b) {
  at::NoGradGuard no_grad;
  b.shard = at::empty({b.shard_numel}, b.options);  // the reduce-scatter writes all of it
  const int64_t lo = comm_->rank() * b.shard_numel;
  for (size_t si : b.segments) {
    Segment& s = segments_[si];
    s.grad.set_(b.shard, offset_of_[s.param] + s.begin - lo, {s.length}, {1});
  }
}

void GradientSync::release_shard(Bucket& b) {
  at::NoGradGuard no_grad;
  for (size_t si : b.segments) segments_[si].grad.set_();  // drops its reference to the shard
  b.shard.reset();
}

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_) {
    FP8T_CHECK(!b.pending.valid(), "GradientSync::arm: the previous step was not finished");
    b.remaining = static_cast<int>(b.params.size());
    b.launched = false;
  }
  complete_.assign(buckets_.size(), false);
  next_to_launch_ = 0;
  launched_in_backward_ = 0;
  peak_live_ = live_;
  armed_ = true;
}

void GradientSync::on_gradient_arriving(size_t param_index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[bucket_of_[param_index]];
  // A second gradient after the bucket was reduced would land in a new bucket and be lost.
  FP8T_CHECK(!b.launched, "GradientSync: parameter ", param_index, " received a gradient after its bucket was "
             "reduce-scattered in this backward (is it used in two places of a recomputed part?)");
  if (!b.flat.defined()) allocate(b);
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
  while (next_to_launch_ < buckets_.size() && complete_[next_to_launch_]) {
    launch(buckets_[next_to_launch_]);
    // ZeRO-1: the bucket launched two before this one has finished reducing by now (the
    // collectives run in order, and a whole bucket's gradients were computed since): waiting
    // for it costs the stream nothing, and its full buffer can go.
    if (shard_ && next_to_launch_ >= 2) release(buckets_[next_to_launch_ - 2]);
    ++next_to_launch_;
  }
}

void GradientSync::launch(Bucket& b) {
  if (!shard_) {
    b.pending = comm_->all_reduce_async({b.flat}, ReduceOp::kSum);
    return;
  }
  if (!b.flat.defined()) allocate(b);  // no gradient reached it: zeros, so every rank reduces the same buckets
  attach_shard(b);
  b.pending = comm_->reduce_scatter_async(b.shard, b.flat);
  b.launched = true;
}

void GradientSync::build_segments() {
  for (size_t k = 0; k < params_.size(); ++k) {
    Bucket& b = buckets_[bucket_of_[k]];
    const int64_t lo = comm_->rank() * b.shard_numel, hi = lo + b.shard_numel;
    const int64_t first = std::max(lo, offset_of_[k]), last = std::min(hi, offset_of_[k] + params_[k].numel());
    if (last <= first) continue;
    b.segments.push_back(segments_.size());
    // Not a view of a shard: a tensor of its own that attach_shard points into each new shard.
    segments_.push_back(Segment{k, first - offset_of_[k], last - first, at::empty({0}, b.options)});
  }
}

std::vector<at::Tensor> GradientSync::gradient_shards() const {
  FP8T_CHECK(shard_, "GradientSync::gradient_shards needs ZeRO-1");
  std::vector<at::Tensor> out;
  for (const Bucket& b : buckets_) out.push_back(b.shard);
  return out;
}

int64_t GradientSync::full_bucket_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    if (b.flat.defined()) bytes += b.flat.numel() * static_cast<int64_t>(b.flat.element_size());
  }
  return bytes;
}

void GradientSync::gather_bucket(Bucket& b, at::Tensor& staging) {
  staging = at::empty({b.numel}, b.options);
  // The owned segments go into the rank's slice (its padding is never read back) ...
  for (size_t si : b.segments) {
    const Segment& s = segments_[si];
    staging.narrow(0, offset_of_[s.param] + s.begin, s.length)
        .copy_(params_[s.param].detach().view(-1).narrow(0, s.begin, s.length));
  }
  // ... which is all-gathered in place.
  b.pending = comm_->all_gather_async(staging, staging.narrow(0, comm_->rank() * b.shard_numel, b.shard_numel));
}

void GradientSync::scatter_gathered(Bucket& b, const at::Tensor& staging) {
  b.pending.wait();
  for (size_t k : b.params) {
    params_[k].detach().view(-1).copy_(staging.narrow(0, offset_of_[k], params_[k].numel()));
  }
}

void GradientSync::gather_parameters() {
  FP8T_CHECK(shard_, "GradientSync::gather_parameters needs ZeRO-1");
  at::NoGradGuard no_grad;
  // A window of kGatherInFlight buckets: the next all-gather runs while the previous one is
  // copied into the parameters, and at most that many staging buffers exist at once (a
  // buffer dropped after its wait is reused by the caching allocator in stream order).
  std::deque<std::pair<Bucket*, at::Tensor>> in_flight;
  for (Bucket& b : buckets_) {
    in_flight.emplace_back(&b, at::Tensor());
    gather_bucket(b, in_flight.back().second);
    if (in_flight.size() > kGatherInFlight) {
      scatter_gathered(*in_flight.front().first, in_flight.front().second);
      in_flight.pop_front();
    }
  }
  for (auto& [b, staging] : in_flight) scatter_gathered(*b, staging);
}

void GradientSync::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  FP8T_CHECK(armed_, "GradientSync::finish without arm()");
  // Buckets some of whose parameters got no gradient in this backward are launched here, in
  // order, so every rank issues the same sequence of collectives.
  std::fill(complete_.begin(), complete_.end(), true);
  launch_ready_in_order();
  const double inv_world = 1.0 / static_cast<double>(comm_->world_size());
  for (Bucket& b : buckets_) {
    b.pending.wait();
    (shard_ ? b.shard : b.flat).mul_(inv_world);  // ZeRO-1: only the shard holds sums over ranks
  }
  for (Bucket& b : buckets_) {
    if (shard_ && b.flat.defined()) release(b);
    b.launched = false;
  }
  armed_ = false;
}

void GradientSync::zero_grad() {
  if (shard_) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Bucket& b : buckets_) {
      if (b.flat.defined()) release(b);
      if (b.shard.defined()) release_shard(b);
    }
    return;
  }
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
