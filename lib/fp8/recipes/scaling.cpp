#include "lib/fp8/recipes/scaling.h"

#include <string>  // std::to_string

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

thread_local int no_record_depth = 0;

}  // namespace

NoRecordScope::NoRecordScope() { ++no_record_depth; }
NoRecordScope::~NoRecordScope() { --no_record_depth; }
bool NoRecordScope::active() { return no_record_depth > 0; }

Scaling::Scaling(const Recipe& recipe) : recipe_(recipe) {}

int Scaling::add_slot(const std::string& name, Format format, TensorRole role) {
  FP8T_CHECK(!finalized(), "slots must be added before finalize()");
  names_.push_back(name);
  formats_.push_back(format);
  roles_.push_back(role);
  return static_cast<int>(names_.size()) - 1;
}

Format Scaling::format_for(TensorRole role) const {
  return role == TensorRole::kGradOutput ? recipe_.backward_format() : recipe_.forward_format();
}

void Scaling::finalize(const at::Device& device) {
  FP8T_CHECK(!finalized(), "finalize() called twice");
  device_ = device;
  stats_sum_ = at::zeros({num_slots(), 3}, at::TensorOptions().dtype(at::kFloat).device(device));
  allocate(device);
}

const at::Device& Scaling::device() const {
  FP8T_CHECK(finalized(), "FP8 scaling state used before finalize()");
  return *device_;
}

std::optional<SlotRef> Scaling::fused_cast_slot(int /*slot*/, bool /*record*/) const { return std::nullopt; }

at::Tensor Scaling::recast_scale(int /*slot*/) const { return at::Tensor(); }

SlotRef Scaling::slot_for_known_amax(int /*slot*/, const at::Tensor& /*known_amax*/, bool /*record*/) {
  FP8T_CHECK(false, "fp8 recipe ", to_string(kind()), ": its casts take no scale from a producer's amax alone");
  return SlotRef{};
}

bool Scaling::fast_accumulation(GemmKind kind) const {
  const FastAccumulation& f = recipe_.fast_accumulation;
  switch (kind) {
    case GemmKind::kFprop: return f.fprop;
    case GemmKind::kDgrad: return f.dgrad;
    case GemmKind::kWgrad: return f.wgrad;
  }
  return false;
}

std::string Scaling::unsupported_linear(int64_t /*in_features*/, int64_t /*out_features*/) const { return ""; }

std::string Scaling::unsupported_grouped_linear() const {
  if (traits().grouped_gemm) return "";
  return std::string("the ") + traits().name + " recipe has no grouped FP8 GEMM (the grouped kernel takes one scale " +
         "per tensor or per row); FP8 experts under fp8.recipe " + recipes_with_grouped_gemm();
}

std::string Scaling::dims_not_multiples_of_16(int64_t in_features, int64_t out_features, const char* gemm) {
  if (in_features % 16 == 0 && out_features % 16 == 0) return "";
  return "features " + std::to_string(in_features) + "x" + std::to_string(out_features) + " not multiples of 16 (" +
         gemm + " requirement)";
}

void Scaling::add_stats(int index, const at::Tensor& fractions) {
  at::Tensor row = stats_sum_[index];
  row.narrow(0, 0, 2).add_(fractions.to(row.device()));
  row[2].add_(1.0);
}

std::pair<float, float> Scaling::stats_fractions(const at::Tensor& sums_cpu, int i) const {
  const float n = sums_cpu[i][2].item<float>();
  if (n <= 0) return {0.0f, 0.0f};
  return {sums_cpu[i][0].item<float>() / n, sums_cpu[i][1].item<float>() / n};
}

std::vector<SlotStats> Scaling::per_tensor_stats(const at::Tensor& amax_dev, const at::Tensor& scale_dev) {
  const at::Tensor amax = amax_dev.cpu(), scale = scale_dev.cpu(), sums = stats_sums().cpu();
  std::vector<SlotStats> out;
  for (int i = 0; i < num_slots(); ++i) {
    const auto [saturated, underflow] = stats_fractions(sums, i);
    out.push_back(SlotStats{slot_name(i), format_name(slot_format(i)), amax[i].item<float>(), scale[i].item<float>(),
                            saturated, underflow, std::nullopt, std::nullopt});
  }
  reset_stats();
  return out;
}

at::Tensor Scaling::fp8_max_tensor() const {
  std::vector<float> maxes;
  for (Format f : formats_) maxes.push_back(format_max(f));
  return at::tensor(maxes, at::kFloat).to(device());
}

int64_t Scaling::part_scale_floats(int64_t /*rows*/, int64_t /*cols*/) const { return 1; }

at::Tensor Scaling::flat_part_scales(const Fp8Operand& part, int64_t /*count*/) const {
  return part.scale_inv.reshape({1});
}

at::Tensor Scaling::gathered_scale_inv(int64_t /*rows*/, int64_t /*cols*/, const std::vector<at::Tensor>& owners) const {
  FP8T_CHECK(!owners.empty(), "Fp8Gather: a weight without owner");
  return owners.front().select(0, 0);
}

ValueCompanion Scaling::value_companion(const CastOptions& opt) {
  ValueCompanion v;
  if (opt.value_columnwise == nullptr) return v;
  FP8T_CHECK(opt.value_scale.defined(), "fp8: the value's codes of a SwiGLU gradient cast need the value's scale");
  v.slot.scale = opt.value_scale;
  v.slot.format = opt.value_format;
  v.columnwise = opt.value_columnwise;
  return v;
}

}  // namespace fp8
}  // namespace fp8t
