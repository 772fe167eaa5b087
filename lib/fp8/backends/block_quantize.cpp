#include "lib/fp8/backends/block_quantize.h"

#include <algorithm>  // std::max
#include <array>      // std::array
#include <sstream>    // std::ostringstream

#include "lib/numerics/block_math.h"  // kBlockLen, layouts, kE4M3Max
#include "lib/numerics/format.h"      // decode_e4m3
#include "lib/util/error.h"           // FP8T_CHECK

namespace fp8t {
namespace fp8 {

namespace {

// The buffer extents (rows, row stride) and the logical grid (sizes, strides) of a scale layout.
struct GridLayout {
  int64_t buffer_rows, buffer_stride;
  std::array<int64_t, 2> sizes, strides;
};

GridLayout grid_layout(int64_t rows, int64_t k, int block_rows) {
  if (block_rows == 1) {
    const int64_t n_kb = vec128_scale_rows(rows, k), stride = vec128_scale_stride(rows);
    return {n_kb, stride, {rows, n_kb}, {1, stride}};
  }
  const int64_t n_rb = blk128_scale_rows(rows), n_kb = ceil_div(k, kBlockLen), stride = blk128_scale_stride(k);
  return {n_rb, stride, {n_rb, n_kb}, {stride, 1}};
}

}  // namespace

at::Tensor make_block_scales(int64_t rows, int64_t k, int block_rows, const at::Device& device, bool zero_fill) {
  const GridLayout g = grid_layout(rows, k, block_rows);
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  const at::Tensor buffer = zero_fill ? at::zeros({g.buffer_rows, g.buffer_stride}, opts)
                                      : at::empty({g.buffer_rows, g.buffer_stride}, opts);
  return buffer.as_strided(g.sizes, g.strides, 0);
}

bool has_block_scale_layout(const at::Tensor& s, int64_t rows, int64_t k, int block_rows) {
  if (!s.defined() || s.scalar_type() != at::kFloat || s.dim() != 2 || s.storage_offset() != 0) return false;
  const GridLayout g = grid_layout(rows, k, block_rows);
  if (s.sizes() != at::IntArrayRef(g.sizes)) return false;
  // A dimension of extent 1 may carry any stride (LibTorch normalises some); the buffer must hold
  // the padded grid.
  for (int d = 0; d < 2; ++d) {
    if (g.sizes[d] > 1 && s.stride(d) != g.strides[d]) return false;
  }
  const int64_t needed = g.buffer_rows * g.buffer_stride * static_cast<int64_t>(sizeof(float));
  return static_cast<int64_t>(s.storage().nbytes()) >= needed;
}

std::string describe_block_scale_layout(int64_t rows, int64_t k, int block_rows) {
  const GridLayout g = grid_layout(rows, k, block_rows);
  std::ostringstream os;
  os << "[" << g.sizes[0] << ", " << g.sizes[1] << "] float32 with strides (" << g.strides[0] << ", " << g.strides[1]
     << ")";
  return os.str();
}

BlockQuantized block_quantize(const at::Tensor& x, int block_rows, bool rowwise, bool columnwise, bool power_of_2) {
#if defined(FP8T_WITH_CUDA)
  if (x.is_cuda()) return block_quantize_cuda(x, block_rows, rowwise, columnwise, power_of_2);
#endif
  FP8T_CHECK(x.is_cpu(), "block quantize: no block cast for tensors on ", x.device().str(), " in this build");
  return block_quantize_cpu(x, block_rows, rowwise, columnwise, power_of_2);
}

// Broadcast views and one copy (repeat_interleave would synchronise with the GPU for its size).
at::Tensor expand_block_scales(const at::Tensor& scale_inv, int64_t rows, int64_t k, int block_rows) {
  const int64_t r = scale_inv.size(0), c = scale_inv.size(1);
  at::Tensor s = scale_inv.unsqueeze(2).expand({r, c, kBlockLen}).reshape({r, c * kBlockLen}).slice(1, 0, k);
  if (block_rows != 1) s = s.unsqueeze(1).expand({r, kBlockLen, k}).reshape({r * kBlockLen, k}).slice(0, 0, rows);
  return s.contiguous();
}

at::Tensor block_dequantize(const BlockCodes& op, int block_rows) {
  static const at::Tensor lut = [] {
    at::Tensor t = at::empty({256}, at::kFloat);
    for (int c = 0; c < 256; ++c) t.data_ptr<float>()[c] = decode_e4m3(static_cast<uint8_t>(c));
    return t;
  }();
  const int64_t rows = op.codes.size(0), k = op.codes.size(1);
  const at::Tensor values = lut.to(op.codes.device()).index({op.codes.to(at::kLong)});
  return values * expand_block_scales(op.scale_inv, rows, k, block_rows);
}

at::Tensor block_cast_stats(const at::Tensor& x, const BlockCodes& q, int block_rows) {
  const int64_t rows = q.codes.size(0), k = q.codes.size(1);
  FP8T_CHECK(x.dim() == 2 && x.size(0) == rows && x.size(1) == k, "block cast stats: x ", x.sizes(),
             " does not match the codes ", q.codes.sizes());
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor scale = at::reciprocal(q.scale_inv);  // exact for power-of-2 scales
  const at::Tensor scaled = xf * expand_block_scales(scale, rows, k, block_rows);
  const double n = static_cast<double>(std::max<int64_t>(1, rows * k));
  const at::Tensor saturated = (scaled.abs() > kE4M3Max).sum().to(at::kFloat) / n;  // NaN compares false
  const at::Tensor flushed = ((xf != 0) & (q.codes.bitwise_and(0x7f) == 0)).sum().to(at::kFloat) / n;
  const at::Tensor abs = xf.abs();
  const at::Tensor amax = x.numel() == 0 ? at::zeros_like(saturated) : at::where(at::isnan(abs), 0.0f, abs).max();
  if (scale.numel() == 0) return at::stack({saturated, flushed, at::ones_like(saturated), at::ones_like(saturated), amax});
  return at::stack({saturated, flushed, scale.min(), scale.max(), amax});
}

}  // namespace fp8
}  // namespace fp8t
