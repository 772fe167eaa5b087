#include "lib/ops/grouped_linear.h"

#include <vector>  // std::vector

#include "lib/util/error.h"         // FP8T_CHECK
#include "lib/util/torch_compat.h"  // compat::autocast_dtype_or

namespace fp8t {
namespace ops {
namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& offsets) {
  FP8T_CHECK(x.dim() == 2 && weight.dim() == 3 && x.size(1) == weight.size(2), "grouped linear: x ", x.sizes(),
             " and weight ", weight.sizes(), " do not match (expected x [M, K] and weight [G, N, K])");
  FP8T_CHECK(offsets.dim() == 1 && offsets.size(0) == weight.size(0) && offsets.scalar_type() == at::kInt,
             "grouped linear: offsets ", offsets.sizes(), " ", offsets.scalar_type(), ", expected int32 [",
             weight.size(0), "]");
}

}  // namespace

at::Tensor grouped_linear_per_group(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& offsets) {
  check_shapes(x, weight, offsets);
  const at::Tensor ends = offsets.to(at::kCPU, at::kLong);
  const int64_t* end = ends.data_ptr<int64_t>();
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  for (int64_t g = 0; g < weight.size(0); ++g) {
    FP8T_CHECK(end[g] >= start && end[g] <= x.size(0), "grouped linear: group ", g, " ends at row ", end[g],
               " (previous end ", start, ", rows ", x.size(0), ")");
    parts.push_back(at::mm(x.narrow(0, start, end[g] - start), weight[g].to(x.scalar_type()).t()));
    start = end[g];
  }
  FP8T_CHECK(start == x.size(0), "grouped linear: the groups end at row ", start, " of ", x.size(0));
  return at::cat(parts, 0);
}

at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& offsets) {
  check_shapes(x, weight, offsets);
  if (!x.is_cuda()) return grouped_linear_per_group(x, weight, offsets);
  // The autocast dtype (bf16 in bf16 and fp8 runs); at::_grouped_mm's own backward gives dx and dW
  // (the weight's gradient widened to its FP32 dtype by the cast's backward).
  const at::ScalarType hp = compat::autocast_dtype_or(x.device().type(), x.scalar_type());
  return at::_grouped_mm(x.to(hp), weight.to(hp).transpose(-2, -1), offsets);
}

}  // namespace ops
}  // namespace fp8t
