#include "lib/dist/shard_group.h"

#include <ATen/ATen.h>            // at::empty, at::zeros
#include <ATen/core/grad_mode.h>  // at::NoGradGuard

#include <algorithm>  // std::max

#include "lib/dist/fp8_gather.h"       // Fp8Gather
#include "lib/fp8/recipes/scaling.h"   // fp8::Scaling::weight_parts
#include "lib/util/error.h"            // FP8T_CHECK

namespace fp8t::dist {

namespace {

// The bands a group's parameters must keep on one rank: the block recipe's 128-row bands of
// the FP8 weights; nothing elsewhere.
std::vector<int64_t> bands_of(const std::vector<GroupParam>& params, const ShardingContext& ctx) {
  const int64_t rows = ctx.scaling != nullptr ? ctx.scaling->weight_parts().row_multiple : 0;
  std::vector<int64_t> bands;
  for (const GroupParam& p : params) bands.push_back(p.fp8 != nullptr && rows > 0 ? rows * p.param.size(1) : 0);
  return bands;
}

// Points `param` at `storage` from element `offset` on (its sizes and strides stay).
void point_at(const at::Tensor& param, const c10::Storage& storage, int64_t offset) {
  c10::TensorImpl* impl = param.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(storage);
  impl->set_storage_offset(offset);
}

}  // namespace

ShardGroup::ShardGroup(std::vector<GroupParam> params, ShardingContext& ctx) : params_(std::move(params)), ctx_(ctx) {
  FP8T_CHECK(!params_.empty(), "ShardGroup needs parameters");
  std::vector<int64_t> numels;
  for (const GroupParam& p : params_) {
    FP8T_CHECK(p.param.scalar_type() == at::kFloat && p.param.is_contiguous() && p.param.device() == ctx_.device,
               "ZeRO-3: parameter ", p.name, " is not a contiguous float32 tensor on ", ctx_.device.str());
    FP8T_CHECK((p.fp8 != nullptr) == (params_.front().fp8 != nullptr), "ShardGroup mixes FP8 and other parameters");
    numels.push_back(p.param.numel());
  }
  layout_ = make_shard_layout(numels, bands_of(params_, ctx_), ctx_.comm->world_size());
  at::NoGradGuard no_grad;
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(ctx_.device);
  master_ = at::zeros({layout_.shard_numel}, fp32);
  for (size_t k = 0; k < params_.size(); ++k) {
    const ShardLayout::Part p = part(k);
    if (p.length > 0) {
      master_.narrow(0, p.shard_offset, p.length).copy_(params_[k].param.detach().view(-1).narrow(0, p.begin, p.length));
    }
    segment_grads_.push_back(at::empty({0}, fp32));
  }
  if (params_.front().fp8 != nullptr) fp8_ = std::make_unique<Fp8Gather>(params_, layout_, ctx_);
  // From here on the parameters hold no bytes (the storage every one of them points into is empty).
  storage_ = at::empty({0}, fp32).storage();
  for (size_t k = 0; k < params_.size(); ++k) point_at(params_[k].param, storage_, layout_.offsets[k]);
}

ShardGroup::~ShardGroup() = default;

ShardLayout::Part ShardGroup::part(size_t k) const { return layout_.part(k, ctx_.comm->rank()); }

void ShardGroup::count_gathered(int64_t bytes) {
  ctx_.gathered_bytes += bytes;
  ctx_.gathered_peak = std::max(ctx_.gathered_peak, ctx_.gathered_bytes);
}

void ShardGroup::count_grad_buffer(int64_t bytes) {
  ctx_.grad_buffer_bytes += bytes;
  ctx_.grad_buffer_peak = std::max(ctx_.grad_buffer_peak, ctx_.grad_buffer_bytes);
}

// ---- weights ------------------------------------------------------------------------------

// Gives the parameters' StorageImpl `numel` FP32 elements and returns an alias tensor over them.
at::Tensor ShardGroup::fill_storage(int64_t numel) {
  c10::StorageImpl* s = storage_.unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(static_cast<size_t>(numel) * sizeof(float)));
  s->set_nbytes(static_cast<size_t>(numel) * sizeof(float));
  count_gathered(numel * static_cast<int64_t>(sizeof(float)));
  return at::empty({0}, master_.options()).set_(storage_, 0, {numel}, {1});
}

void ShardGroup::issue_gather(bool record) {
  FP8T_CHECK(!gather_.valid() && storage_.nbytes() == 0, "ShardGroup: gathered twice");
  at::NoGradGuard no_grad;
  if (fp8_) {
    fp8_->issue(master_, record);
    return;
  }
  // Sent in the compute dtype. An FP32 gather lands in the parameters' storage itself; a 16-bit
  // one in a wire buffer that complete_gather widens into it.
  const bool fp32 = ctx_.compute_dtype == at::kFloat;
  send_ = fp32 ? master_ : master_.to(ctx_.compute_dtype);
  wire_ = fp32 ? fill_storage(layout_.numel()) : at::empty({layout_.numel()}, master_.options().dtype(ctx_.compute_dtype));
  gather_ = ctx_.comm->all_gather_async(wire_, send_);
}

void ShardGroup::complete_gather() {
  at::NoGradGuard no_grad;
  if (fp8_) {
    count_gathered(fp8_->complete());
    return;
  }
  FP8T_CHECK(gather_.valid(), "ShardGroup: complete_gather without issue_gather");
  gather_.wait();
  send_.reset();
  if (wire_.scalar_type() != at::kFloat) fill_storage(layout_.numel()).copy_(wire_);
  wire_.reset();
}

bool ShardGroup::in_flight() const { return fp8_ ? fp8_->in_flight() : gather_.valid(); }

void ShardGroup::free() {
  if (in_flight()) complete_gather();  // a gather in flight is received first (collectives pair up)
  if (fp8_) {
    count_gathered(-fp8_->free());
    return;
  }
  c10::StorageImpl* s = storage_.unsafeGetStorageImpl();
  count_gathered(-static_cast<int64_t>(s->nbytes()));
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void ShardGroup::record_weight_amax(const at::Tensor& amax) const {
  if (fp8_) fp8_->record_amax(master_, amax);
}

// ---- gradients ----------------------------------------------------------------------------

void ShardGroup::allocate_gradients() {
  if (full_grad_.defined()) return;
  at::NoGradGuard no_grad;
  full_grad_ = at::zeros({layout_.numel()}, master_.options());
  count_grad_buffer(layout_.numel() * 4);
  for (size_t k = 0; k < params_.size(); ++k) {
    at::Tensor& p = params_[k].param;
    p.mutable_grad() = full_grad_.narrow(0, layout_.offsets[k], p.numel()).view(p.sizes());
  }
}

void ShardGroup::allocate_shard(bool zero) {
  grad_shard_ = zero ? at::zeros({layout_.shard_numel}, master_.options()) : at::empty({layout_.shard_numel}, master_.options());
  for (size_t k = 0; k < params_.size(); ++k) {
    const ShardLayout::Part p = part(k);
    if (p.length > 0) segment_grads_[k].set_(grad_shard_.storage(), p.shard_offset, {p.length}, {1});
  }
}

void ShardGroup::launch_reduce() {
  FP8T_CHECK(!reduce_.valid(), "ShardGroup: a reduction is already in flight");
  allocate_gradients();  // zeros for a group no gradient reached, so that every rank reduces alike
  at::NoGradGuard no_grad;
  for (GroupParam& p : params_) p.param.mutable_grad().reset();  // the views go; the buffer stays for the collective
  at::Tensor in = full_grad_;
  if (ctx_.reduce_dtype != at::kFloat) {
    in = full_grad_.to(ctx_.reduce_dtype);
    full_grad_.reset();
    count_grad_buffer(-layout_.numel() * 4);
    wire_grad_ = in;
  }
  // The step's first FP32 reduction writes the shard itself; later ones are added in retire.
  accumulate_ = grad_shard_.defined() || ctx_.reduce_dtype != at::kFloat;
  if (!accumulate_) allocate_shard(/*zero=*/false);
  reduced_ = accumulate_ ? at::empty({layout_.shard_numel}, in.options()) : grad_shard_;
  reduce_ = ctx_.comm->reduce_scatter_async(reduced_, in);
}

void ShardGroup::retire_reduce() {
  if (!reduce_.valid()) return;
  reduce_.wait();  // NCCL: the current stream waits; the buffers below are then free to go
  at::NoGradGuard no_grad;
  if (accumulate_) {
    if (!grad_shard_.defined()) allocate_shard(/*zero=*/true);
    grad_shard_.add_(reduced_);
  }
  reduced_.reset();
  wire_grad_.reset();
  if (full_grad_.defined()) count_grad_buffer(-layout_.numel() * 4);
  full_grad_.reset();
}

void ShardGroup::launch_replica_reduce(Communicator& replicas) {
  if (!grad_shard_.defined()) allocate_shard(/*zero=*/true);
  replica_ = replicas.all_reduce_async({grad_shard_}, ReduceOp::kSum);
}

void ShardGroup::average(double factor) {
  replica_.wait();
  if (!grad_shard_.defined()) allocate_shard(/*zero=*/true);
  at::NoGradGuard no_grad;
  grad_shard_.mul_(factor);
}

void ShardGroup::release_gradients() {
  FP8T_CHECK(!reduce_.valid() && !replica_.valid(), "ShardGroup: gradients released during a reduction");
  at::NoGradGuard no_grad;
  for (at::Tensor& g : segment_grads_) g.set_();
  for (GroupParam& p : params_) p.param.mutable_grad().reset();
  if (full_grad_.defined()) count_grad_buffer(-layout_.numel() * 4);
  full_grad_.reset();
  grad_shard_.reset();
}

std::vector<at::Tensor> ShardGroup::gather_full() const {
  at::NoGradGuard no_grad;
  const at::Tensor full = at::empty({layout_.numel()}, master_.options());
  ctx_.comm->all_gather(full, master_);
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < params_.size(); ++k) {
    out.push_back(full.narrow(0, layout_.offsets[k], layout_.numels[k]).view(params_[k].param.sizes()).clone());
  }
  return out;
}

}  // namespace fp8t::dist
