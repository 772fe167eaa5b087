#include "lib/dist/fp8_gather.h"

#include <ATen/ATen.h>            // at::empty, at::zeros
#include <ATen/core/grad_mode.h>  // at::NoGradGuard

#include <algorithm>  // std::max

#include "lib/fp8/layers/fp8_linear.h"  // Fp8Linear, GatheredWeight
#include "lib/fp8/recipes/scaling.h"    // Scaling (its ZeRO-3 rules: weight_parts, part_scale_floats, ...)
#include "lib/util/error.h"             // FP8T_CHECK

namespace fp8t::dist {

namespace {

// cuBLASLt reads a scale through a pointer that must be 16-byte aligned (a per-tensor scale at
// a 4-byte offset is CUBLAS_STATUS_NOT_SUPPORTED on an H200): every weight's scales start at a
// multiple of 4 floats in the gathered buffer.
constexpr int64_t kScaleAlignFloats = 4;
int64_t aligned_floats(int64_t n) { return (n + kScaleAlignFloats - 1) / kScaleAlignFloats * kScaleAlignFloats; }

}  // namespace

Fp8Gather::Fp8Gather(const std::vector<GroupParam>& params, const ShardLayout& layout, ShardingContext& ctx)
    : ctx_(ctx), layout_(layout) {
  FP8T_CHECK(ctx_.scaling != nullptr, "Fp8Gather needs the FP8 recipe's state");
  parts_ = ctx_.scaling->weight_parts();
  const int world = layout_.world;
  std::vector<int64_t> used(world, 0);  // scale floats per rank so far
  for (size_t k = 0; k < params.size(); ++k) {
    Weight w;
    w.layer = params[k].fp8;
    w.fp8_index = params[k].fp8_index;
    w.rows = params[k].param.size(0);
    w.cols = params[k].param.size(1);
    w.offset = layout_.offsets[k];
    w.gathered = std::make_shared<fp8::GatheredWeight>();
    for (int r = 0; r < world; ++r) {
      const ShardLayout::Part p = layout_.part(k, r);
      const int64_t count = p.length > 0 ? ctx_.scaling->part_scale_floats(p.length / w.cols, w.cols) : 0;
      w.scale_begin.push_back(used[r]);
      w.scale_count.push_back(count);
      used[r] += aligned_floats(count);
    }
    w.layer->set_gathered_weight(w.gathered);
    weights_.push_back(std::move(w));
  }
  scale_shard_ = std::max<int64_t>(kScaleAlignFloats, *std::max_element(used.begin(), used.end()));
}

Fp8Gather::~Fp8Gather() {
  for (Weight& w : weights_) w.layer->set_gathered_weight(nullptr);
}

at::Tensor Fp8Gather::owned_part(const at::Tensor& master, size_t w) const {
  const ShardLayout::Part p = layout_.part(w, ctx_.comm->rank());
  if (p.length == 0) return at::Tensor();
  const at::Tensor flat = master.narrow(0, p.shard_offset, p.length);
  // Bands of whole rows (the layout keeps them together: block, 128 rows); else any range, as one row.
  return parts_.row_multiple > 0 ? flat.view({p.length / weights_[w].cols, weights_[w].cols}) : flat.view({1, p.length});
}

void Fp8Gather::cast_owned(const at::Tensor& master, bool record) {
  fp8::Scaling& scaling = *ctx_.scaling;
  const bool whole_amax = parts_.whole_amax;
  if (!owned_codes_.defined()) {
    owned_codes_ = at::zeros({layout_.shard_numel}, master.options().dtype(at::kByte));
    owned_scales_ = at::zeros({scale_shard_}, master.options());
  }
  const int rank = ctx_.comm->rank();
  for (size_t k = 0; k < weights_.size(); ++k) {
    const Weight& w = weights_[k];
    const int slot = w.layer->slot_weight();
    // Every rank sets the slot state a cast of the whole weight leaves, also without a part of it.
    const at::Tensor scale = whole_amax ? scaling.sharded_weight_scale(slot, ctx_.weight_amax[w.fp8_index], record)
                                        : at::Tensor();
    const at::Tensor part = owned_part(master, k);
    if (!part.defined()) continue;
    fp8::CastOptions opt;
    opt.rowwise = true;
    opt.columnwise = false;
    opt.record = record && !scale.defined();
    opt.scale = scale;
    const fp8::Fp8Operand q = scaling.quantize(slot, fp8::CastSource::tensor(part), opt).rowwise;
    const ShardLayout::Part p = layout_.part(k, rank);
    owned_codes_.narrow(0, p.shard_offset, p.length).copy_(q.codes.reshape({-1}));
    owned_scales_.narrow(0, w.scale_begin[rank], w.scale_count[rank]).copy_(scaling.flat_part_scales(q, w.scale_count[rank]));
  }
}

void Fp8Gather::issue(const at::Tensor& master, bool record) {
  FP8T_CHECK(!codes_pending_.valid(), "Fp8Gather: gathered twice");
  at::NoGradGuard no_grad;
  if (!(owned_key_ == ctx_.weight_key) || (record && !owned_recorded_)) {
    cast_owned(master, record);
    owned_key_ = ctx_.weight_key;
    owned_recorded_ = record;
  }
  codes_ = at::empty({layout_.numel()}, owned_codes_.options());
  scales_ = at::empty({scale_shard_ * layout_.world}, owned_scales_.options());
  codes_pending_ = ctx_.comm->all_gather_async(codes_, owned_codes_);
  scales_pending_ = ctx_.comm->all_gather_async(scales_, owned_scales_);
}

// The weight's scale_inv from every owner's gathered scales, in row order (the recipe assembles it).
at::Tensor Fp8Gather::scale_inv_of(const Weight& w) const {
  std::vector<at::Tensor> owners;
  for (int r = 0; r < layout_.world; ++r) {
    if (w.scale_count[r] > 0) owners.push_back(scales_.narrow(0, r * scale_shard_ + w.scale_begin[r], w.scale_count[r]));
  }
  return ctx_.scaling->gathered_scale_inv(w.rows, w.cols, owners);
}

int64_t Fp8Gather::complete() {
  FP8T_CHECK(codes_pending_.valid(), "Fp8Gather: complete without issue");
  codes_pending_.wait();
  scales_pending_.wait();
  at::NoGradGuard no_grad;
  fp8::Scaling& scaling = *ctx_.scaling;
  for (Weight& w : weights_) {
    w.gathered->rowwise = fp8::Fp8Operand{codes_.narrow(0, w.offset, w.rows * w.cols).view({w.rows, w.cols}),
                                          scale_inv_of(w), scaling.slot_format(w.layer->slot_weight()), parts_.scale_layout};
  }
  return codes_.numel() + scales_.numel() * 4;
}

int64_t Fp8Gather::free() {
  FP8T_CHECK(!codes_pending_.valid(), "Fp8Gather: freed while its gather is in flight");
  const int64_t bytes = codes_.defined() ? codes_.numel() + scales_.numel() * 4 : 0;
  for (Weight& w : weights_) w.gathered->rowwise = fp8::Fp8Operand{};
  codes_.reset();
  scales_.reset();
  return bytes;
}

void Fp8Gather::record_amax(const at::Tensor& master, const at::Tensor& amax) const {
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < weights_.size(); ++k) {
    const at::Tensor part = owned_part(master, k);
    if (part.defined()) {
      fp8::backend_for(part.device()).record_amax(fp8::CastSource::tensor(part), amax[weights_[k].fp8_index]);
    }
  }
}

}  // namespace fp8t::dist
